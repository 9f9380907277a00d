package cdcgen

import (
	"strings"

	"github.com/cdcjoin/cdcjoin/row"
)

// ChangeKey returns the row key of a join change in the oracle's form: the
// key values' text joined by ',' (a LEFT join's padded row has no child).
func ChangeKey(c *row.Change) RowKey {
	key := RowKey{Parent: valuesText(c.ParentKey)}
	if c.ChildKey == nil {
		key.Padded = true
	} else {
		key.Child = valuesText(c.ChildKey)
	}
	return key
}

// ApplyChange applies a join change (an upsert, or a retraction as a
// deletion) to m, with its values as text (Null for NULL), and returns its
// row key.
func (m *ReplacingMergeTree) ApplyChange(c *row.Change) (RowKey, error) {
	key := ChangeKey(c)
	vals := make([]string, len(c.Values))
	for i, v := range c.Values {
		if v.IsNull() {
			vals[i] = Null
		} else {
			vals[i] = v.Text()
		}
	}
	return key, m.Apply(key, c.Version, c.Op == row.Retract, vals)
}

func valuesText(vs []row.Value) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.Text()
	}
	return strings.Join(parts, ",")
}
