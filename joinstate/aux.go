package joinstate

// auxKey builds the key of an Aux entry in t.key. The Aux keyspace has no
// generation: truncates never clear it.
func (t *Txn) auxKey(key []byte) []byte {
	t.key = append(append(t.key[:0], prefixAux), key...)
	return t.key
}

// Aux returns the Aux value of key (see keyed.State). The slice is valid
// until the next call on the Txn.
func (t *Txn) Aux(key []byte) ([]byte, bool, error) { return t.get(t.auxKey(key)) }

// PutAux stores an Aux value (the Txn copies it).
func (t *Txn) PutAux(key, value []byte) error { return t.set(t.auxKey(key), value) }

// DeleteAux removes an Aux value.
func (t *Txn) DeleteAux(key []byte) error { return t.del(t.auxKey(key)) }

// AuxScan streams the Aux entries whose key starts with prefix and is at
// least start (nil: from the first), in key order, seeing the Txn's own
// writes. The slices passed to fn are valid only during the call; writes
// made by fn are not seen by the scan in progress.
func (t *Txn) AuxScan(prefix, start []byte, fn func(key, value []byte) error) error {
	p := append([]byte{prefixAux}, prefix...)
	it, done, err := t.iter(p)
	if err != nil {
		return err
	}
	var valid bool
	if start == nil {
		valid = it.First()
	} else {
		valid = it.SeekGE(append([]byte{prefixAux}, start...))
	}
	for ; valid; valid = it.Next() {
		if err = fn(it.Key()[1:], it.Value()); err != nil {
			break
		}
	}
	return done(err)
}
