package clickhouse

import (
	"strconv"

	"github.com/cdcjoin/cdcjoin/row"
)

// appendKey appends the text encoding of a key tuple, used for the hidden
// _pk and _ck columns: values separated by ',', integers in decimal, strings
// quoted ('it”s' style escaping is not used: ' and \ are backslash-escaped
// and NUL is written as \0), other kinds tagged (d'1.50', date'2024-01-02',
// ts'…', t'…', f'…', b'…'), NULL as NULL. The encoding is injective per
// tuple, never contains a NUL byte, and is never empty for a non-empty tuple,
// so the LEFT join's padded row (_ck = ”) cannot collide with a real child
// key, not even one whose only value is the empty string (encoded as ”).
func appendKey(dst []byte, key []row.Value) []byte {
	for i, v := range key {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch v.Kind {
		case row.KindNull:
			dst = append(dst, "NULL"...)
		case row.KindInt:
			dst = strconv.AppendInt(dst, v.Int, 10)
		case row.KindBool:
			if v.Int != 0 {
				dst = append(dst, "true"...)
			} else {
				dst = append(dst, "false"...)
			}
		case row.KindString:
			dst = appendQuoted(dst, v.Str)
		case row.KindUnavailable:
			dst = append(dst, "UNAVAILABLE"...)
		default:
			dst = append(dst, keyTag(v.Kind)...)
			dst = appendQuoted(dst, v.Text())
		}
	}
	return dst
}

func keyTag(k row.Kind) string {
	switch k {
	case row.KindDecimal:
		return "d"
	case row.KindDate:
		return "date"
	case row.KindTimestamp:
		return "ts"
	case row.KindTime:
		return "t"
	case row.KindFloat:
		return "f"
	case row.KindBytes:
		return "b"
	}
	return "k" + strconv.Itoa(int(k))
}

func appendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'', '\\':
			dst = append(dst, '\\', c)
		case 0:
			dst = append(dst, '\\', '0')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '\'')
}
