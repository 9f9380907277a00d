package job

import (
	"encoding/binary"
	"fmt"
)

// KeyTypes returns what the decoders learned about the types of the key
// and foreign key columns (debezium.Decoder.KeyTypes: each column keeps the
// type of its first value when no type is declared), encoded for storing
// with the state next to the committed positions. A driver that stores it
// at each commit and passes it to RestoreKeyTypes when it opens the state
// keeps "one key column, one type" across restarts; without that, a
// restarted decoder learns afresh from its first record.
func (d *Decoder) KeyTypes() []byte {
	if d.plan != nil {
		return d.plan.KeyTypes()
	}
	p := d.parent.KeyTypes()
	b := binary.AppendUvarint(nil, uint64(len(p)))
	return append(append(b, p...), d.child.KeyTypes()...)
}

// RestoreKeyTypes sets what KeyTypes returned; an empty b changes nothing.
func (d *Decoder) RestoreKeyTypes(b []byte) error {
	if d.plan != nil {
		return d.plan.RestoreKeyTypes(b)
	}
	if len(b) == 0 {
		return nil
	}
	n, m := binary.Uvarint(b)
	if m <= 0 || n > uint64(len(b)-m) {
		return fmt.Errorf("cdcjoin: key types: corrupt encoding")
	}
	if err := d.parent.RestoreKeyTypes(b[m : m+int(n)]); err != nil {
		return err
	}
	return d.child.RestoreKeyTypes(b[m+int(n):])
}

// KeyTypesLearned counts the key columns, of both sides, whose type the
// decoders have fixed; it only grows, so a driver saves KeyTypes when it
// changed.
func (d *Decoder) KeyTypesLearned() int {
	if d.plan != nil {
		return d.plan.KeyTypesLearned()
	}
	return d.parent.KeyTypesLearned() + d.child.KeyTypesLearned()
}
