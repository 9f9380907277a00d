package stage

import (
	"flag"
	"math/rand"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
)

var flagReadAheadSeed = flag.Int64("readahead-seed", 1, "seed of TestReadAheadCoverage")

// readLog is a State that records the reads made through it.
type readLog struct {
	*MemState
	rows, scans, vals map[string]bool
}

func (r *readLog) Row(group, id []byte) ([]byte, bool, error) {
	r.rows[string(group)+"|"+string(id)] = true
	return r.MemState.Row(group, id)
}

func (r *readLog) Rows(group []byte, fn func(id, value []byte) error) error {
	r.scans[string(group)] = true
	return r.MemState.Rows(group, fn)
}

func (r *readLog) Value(key []byte) ([]byte, bool, error) {
	r.vals[string(key)] = true
	return r.MemState.Value(key)
}

// TestReadAheadCoverage applies seeded random histories of the chain
// users ⋈ domains ⋈ records (INNER, then LEFT at both joins) through a
// Pipeline, asking a ReadAhead before each event for its hints (the
// second round from the index entry as the state holds it), and checks
// that the hints name what the pipeline reads: every event's index entry,
// and at least 80% of the point reads and 70% of the scans (the figures
// are logged; the rest are reads through rows the event meets, such as a
// user's domains at the second stage). The
// negative control: hints for another table's item miss the index entry.
func TestReadAheadCoverage(t *testing.T) {
	for _, sql := range []string{
		`SELECT u.id, u.name, d.id AS did, d.name AS dn, r.id AS rid, r.rtype FROM users u JOIN domains d ON d.user_id = u.id JOIN records r ON r.domain_id = d.id`,
		`SELECT u.id, u.name, d.id AS did, d.name AS dn, r.id AS rid, r.rtype FROM users u LEFT JOIN domains d ON d.user_id = u.id LEFT JOIN records r ON r.domain_id = d.id`,
	} {
		seed := *flagReadAheadSeed
		_, p := compileQuery(t, sql)
		pl, ra := NewPipeline(p), NewReadAhead(p)
		kv := &readLog{MemState: NewMemState()}
		rng := rand.New(rand.NewSource(seed))
		tables := []map[int64][]row.Value{{}, {}, {}}
		names := []string{"users", "domains", "records"}
		var ver uint64
		var hinted, read, hintedScans, scans, missedIndex, control int
		for step := 0; step < 3000; step++ {
			ti := rng.Intn(3)
			tab := tables[ti]
			var o op
			id := int64(1 + rng.Intn(8))
			if ti > 0 {
				id = int64(10*ti) + int64(rng.Intn(12))
			}
			ref := func() row.Value {
				if rng.Intn(10) == 0 {
					return nul
				}
				if ti == 1 {
					return i64(int64(1 + rng.Intn(8)))
				}
				return i64(int64(10 + rng.Intn(12)))
			}
			switch {
			case tab[id] != nil && rng.Intn(4) == 0:
				o = del(id)
			case ti == 0:
				o = op{kind: 'c', vals: []row.Value{i64(id), str(string(rune('a' + rng.Intn(3))))}}
			default:
				o = op{kind: 'c', vals: []row.Value{i64(id), ref(), str(string(rune('a' + rng.Intn(3))))}}
			}
			if o.kind == 'c' && tab[id] != nil {
				o.kind = 'u'
			}
			ev := event(o, tab, p.Tables[ti].Columns, schema[names[ti]], rng.Intn(2) == 0)
			hints := map[string]bool{}
			var hintedScan map[string]bool = map[string]bool{}
			ask := func(kind ReadKind, group, id []byte) {
				switch kind {
				case ReadRow:
					hints[string(group)+"|"+string(id)] = true
				case ReadRows:
					hintedScan[string(group)] = true
				case ReadValue:
					hints["v|"+string(group)] = true
				}
			}
			pk, ok := ra.Index(nil, ti, ev, ask)
			if ok {
				if ev.After.Present {
					ra.Row(ti, pk, ev.After.Values, nil, ask)
				}
				if v, had, _ := kv.MemState.Row([]byte{'i', byte(ti)}, pk); had {
					old, err := row.DecodeRow(nil, v)
					if err != nil {
						t.Fatal(err)
					}
					var except []row.Value
					if ev.After.Present {
						except = ev.After.Values
					}
					ra.Row(ti, pk, old, except, ask)
				}
				// Negative control: another item's index entry is not this event's.
				other := map[string]bool{}
				ra.Index(nil, (ti+1)%3, ev, func(_ ReadKind, g, id []byte) { other[string(g)+"|"+string(id)] = true })
				for k := range other {
					if !hints[k] {
						control++
					}
				}
			}
			kv.rows, kv.scans, kv.vals = map[string]bool{}, map[string]bool{}, map[string]bool{}
			err := pl.Apply(kv, ti, ev, func() uint64 { ver++; return ver }, func(*row.Change) error { return nil })
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			applyTable(tab, o)
			if ok && !hints["i"+string(rune(ti))+"|"+string(pk)] {
				missedIndex++
			}
			for k := range kv.rows {
				read++
				if hints[k] {
					hinted++
				}
			}
			for k := range kv.vals {
				read++
				if hints["v|"+k] {
					hinted++
				}
			}
			for g := range kv.scans {
				scans++
				if hintedScan[g] {
					hintedScans++
				}
			}
		}
		if missedIndex > 0 {
			t.Fatalf("seed %d: %d index entries read but not hinted", seed, missedIndex)
		}
		if control == 0 {
			t.Fatalf("seed %d: negative control: another item's hints all matched", seed)
		}
		t.Logf("seed %d: %s\n  point reads hinted: %d of %d (%.0f%%); scans hinted: %d of %d (%.0f%%)", seed, sql,
			hinted, read, 100*float64(hinted)/float64(read), hintedScans, scans, 100*float64(hintedScans)/float64(max(1, scans)))
		if 10*hinted < 8*read || 10*hintedScans < 7*scans {
			t.Fatalf("seed %d: the hints cover less than 80%% of the point reads or 70%% of the scans", seed)
		}
	}
}
