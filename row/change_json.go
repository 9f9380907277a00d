package row

import (
	"strconv"
)

// AppendJSON appends c as one JSON object (no newline), the format of
// `--changes` files and the JSON-lines sink:
//
//	{"op":"upsert","version":7,"prev_version":3,"parent_key":[1],"child_key":[2],
//	 "values":{"user_id":1,"domain_name":"Approval"}}
//
// child_key is null for a LEFT join's padded row; prev_version is present
// when non-zero; names are the output column names in select order. An
// Insert (a time join's row) has no keys:
//
//	{"op":"insert","version":12,"values":{"impression_id":7,"click_id":null}}
func (c *Change) AppendJSON(dst []byte, names []string) []byte {
	dst = append(dst, `{"op":"`...)
	dst = append(dst, c.Op.String()...)
	dst = append(dst, `","version":`...)
	dst = strconv.AppendUint(dst, c.Version, 10)
	if c.Op == Insert {
		dst = append(dst, `,"values":`...)
		dst = AppendJSONObject(dst, names, c.Values)
		return append(dst, '}')
	}
	if c.PrevVersion != 0 {
		dst = append(dst, `,"prev_version":`...)
		dst = strconv.AppendUint(dst, c.PrevVersion, 10)
	}
	dst = append(dst, `,"parent_key":`...)
	dst = appendJSONArray(dst, c.ParentKey)
	dst = append(dst, `,"child_key":`...)
	if c.ChildKey == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONArray(dst, c.ChildKey)
	}
	dst = append(dst, `,"values":`...)
	dst = AppendJSONObject(dst, names, c.Values)
	return append(dst, '}')
}

// AppendJSONObject appends {"names[i]": vals[i], …}.
func AppendJSONObject(dst []byte, names []string, vals []Value) []byte {
	dst = append(dst, '{')
	for i, v := range vals {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendJSONString(dst, names[i])
		dst = append(dst, ':')
		dst = v.AppendJSON(dst)
	}
	return append(dst, '}')
}

func appendJSONArray(dst []byte, vals []Value) []byte {
	dst = append(dst, '[')
	for i, v := range vals {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = v.AppendJSON(dst)
	}
	return append(dst, ']')
}
