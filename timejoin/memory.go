package timejoin

import (
	"bytes"
	"strings"
	"unsafe"

	"github.com/RaduBerinde/btreemap"
)

// A Join keeps two things in memory, rebuilt from the state by Load:
//
//   - the timer queue, ordered by (fire time, kind, key): never written to
//     the state, since every timer follows from a row, a version or a
//     window of the state and the watermark (timers already due have fired
//     before each Save), so the state holds each row once;
//   - a mirror of the whole state (while it fits Options.MemoryBytes), so
//     that reads never go to the storage: a time join's state is the rows
//     inside its bound, not its history. Writes go to both.

const btreeDegree = 32

func newQueue() *btreemap.BTreeMap[string, struct{}] {
	return btreemap.New[string, struct{}](btreeDegree, strings.Compare)
}

// view is a string aliasing b, valid while b is (lookups only).
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// mirror is an in-memory copy of the state.
type mirror struct {
	m     *btreemap.BTreeMap[string, []byte]
	bytes int       // keys and values held
	bufs  [][]entry // Scan's snapshots, one per nesting level
	depth int
}

type entry struct {
	k string
	v []byte
}

func newMirror() *mirror {
	return &mirror{m: btreemap.New[string, []byte](btreeDegree, strings.Compare)}
}

func (m *mirror) put(key, value []byte) {
	k := string(key)
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	if _, old, ok := m.m.ReplaceOrInsert(k, v); ok {
		m.bytes -= len(k) + len(old)
	}
	m.bytes += len(k) + len(v) + 48
}

func (m *mirror) delete(key []byte) {
	if k, old, ok := m.m.Delete(view(key)); ok {
		m.bytes -= len(k) + len(old) + 48
	}
}

// cached is the State a Join reads: the mirror, writing through to st.
type cached struct {
	m  *mirror
	st State
}

func (c cached) Get(key []byte) ([]byte, bool, error) {
	_, v, ok := c.m.m.Get(view(key))
	return v, ok, nil
}

func (c cached) Put(key, value []byte) error {
	if err := c.st.Put(key, value); err != nil {
		return err
	}
	c.m.put(key, value)
	return nil
}

func (c cached) Delete(key []byte) error {
	if err := c.st.Delete(key); err != nil {
		return err
	}
	c.m.delete(key)
	return nil
}

// Scan iterates over a snapshot of the range (the callback may write and
// scan again).
func (c cached) Scan(lo, hi []byte, fn func(key, value []byte) error) error {
	m := c.m
	if m.depth == len(m.bufs) {
		m.bufs = append(m.bufs, nil)
	}
	buf := m.bufs[m.depth][:0]
	stop := btreemap.Max[string]()
	if hi != nil {
		stop = btreemap.LT(view(hi))
	}
	m.m.AscendFunc(btreemap.GE(view(lo)), stop, func(k string, v []byte) bool {
		buf = append(buf, entry{k, v})
		return true
	})
	m.bufs[m.depth] = buf
	m.depth++
	defer func() {
		m.depth--
		clear(m.bufs[m.depth]) // drop references to deleted values
	}()
	for _, e := range buf {
		if err := fn(unsafe.Slice(unsafe.StringData(e.k), len(e.k)), e.v); err != nil {
			return err
		}
	}
	return nil
}
