package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// parallelRun is what one Engine.Run of a history gave: every change in
// emission order, the dead letters, the final join and the whole state.
type parallelRun struct {
	changes, letters, final, state []byte
	changeCount, letterCount       int
}

// letterLog is a dead-letter destination that logs each letter as a line.
type letterLog struct {
	mu sync.Mutex
	b  bytes.Buffer
	n  int
}

func (l *letterLog) DeadLetter(_ context.Context, d *deadletter.Letter) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, "%s/%d@%d %s %q %q: %v\n", d.Topic, d.Partition, d.Offset, d.Kind, d.Key, d.Value, d.Err)
	l.n++
	return nil
}

func appendValues(b []byte, vs []row.Value) []byte {
	b = append(b, '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d:%s", v.Kind, text(v))
	}
	return append(b, ']')
}

// runParallel replays recs with state.parallelism p through Engine.Run.
// With naive, the decoding goroutines learn key classes each on their own
// (engine.SetNaiveDecode: the negative control).
func runParallel(t *testing.T, cfg config.Config, p int, recs []engine.Record, naive bool) parallelRun {
	t.Helper()
	cfg.State.Parallelism = p
	var out parallelRun
	var changes []byte
	emit := func(c *row.Change) error {
		changes = fmt.Appendf(changes, "%d v%d p%d ", c.Op, c.Version, c.PrevVersion)
		changes = appendValues(changes, c.ParentKey)
		changes = appendValues(changes, c.ChildKey)
		changes = appendValues(changes, c.Values)
		changes = appendValues(changes, c.Prev)
		changes = append(changes, '\n')
		out.changeCount++
		return nil
	}
	letters := &letterLog{}
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	e, err := engine.Open(&cfg, engine.Options{Sink: sink.Func(emit), FS: vfs.NewMem(), DeadLetters: letters, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if naive {
		engine.SetNaiveDecode(e)
	}
	ctx := context.Background()
	err = e.Run(ctx, func(yield func(*engine.Record) error) error {
		var rec engine.Record
		for i := range recs {
			rec = recs[i] // reused by the next record, as ReadJSONL does
			rec.Key = append(rec.Key[:0:0], recs[i].Key...)
			if recs[i].Value != nil {
				rec.Value = append([]byte{}, recs[i].Value...)
			}
			if err := yield(&rec); err != nil {
				return err
			}
			for j := range rec.Value { // the record's bytes are reused after yield
				rec.Value[j] = 'X'
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("parallelism %d: %v", p, err)
	}
	if err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	out.changes, out.letters, out.letterCount = changes, letters.b.Bytes(), letters.n
	err = e.Final(func(pk, ck, vals []row.Value) error {
		out.final = appendValues(appendValues(appendValues(out.final, pk), ck), vals)
		out.final = append(out.final, '\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	it, err := e.Store().DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		fmt.Fprintf(h, "%q=%q\n", it.Key(), it.Value())
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	out.state = fmt.Appendf(nil, "%d entries, sha256 %x", n, h.Sum(nil))
	return out
}

// withMismatchedKeys returns recs with bad records spread over them: parent
// records on a partition of their own whose key is a string where the
// history's keys are numbers (a key-class mismatch, debezium.Decoder's
// KeyTypes), a few of them early, while decoders are still learning. A
// decoder that decoded one of them before learning the numbers' class would
// take the string class and reject the good records after it.
func withMismatchedKeys(recs []engine.Record, rng *rand.Rand) []engine.Record {
	at := map[int]bool{}
	for i := 0; i < 6; i++ {
		at[300+rng.Intn(3000)] = true
		at[rng.Intn(len(recs))] = true
	}
	var out []engine.Record
	off := int64(0)
	for i := range recs {
		if at[i] {
			out = append(out, engine.Record{Topic: cdcgen.DefaultParentTopic, Partition: 99, Offset: off,
				Value: fmt.Appendf(nil, `{"op":"c","after":{"id":"x%d","firstname":"a","lastname":"b"}}`, i)})
			off++
		}
		out = append(out, recs[i])
	}
	return out
}

// TestParallelismDeterministic replays seeded histories (snapshots, every
// hard case, hot parents, both schema modes, bad records under policy dlq)
// with state.parallelism 1, 2, 4 and 7: the changes (values, versions and
// order), the dead letters, the final join and the whole state (every
// pebble entry: positions, clock, metadata) must be byte-identical.
func TestParallelismDeterministic(t *testing.T) {
	ss := seeds(t)
	if len(ss) > 6 {
		ss = ss[:6]
	}
	for _, join := range []string{"inner", "left"} {
		for _, seed := range ss {
			t.Run(fmt.Sprintf("%s/seed=%d", join, seed), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewSource(seed))
				opts := cdcgen.DefaultOptions(seed)
				if testing.Short() {
					opts.Ops = 5000
				}
				if *flagOps > 0 {
					opts.Ops = *flagOps
				}
				if seed%2 == 0 {
					opts.ParentSkew = 1.1 + rng.Float64() // hot parents: big fan-outs
				}
				h, err := cdcgen.Generate(opts)
				if err != nil {
					t.Fatal(err)
				}
				recs := make([]engine.Record, len(h.Records))
				for i, r := range h.Records {
					recs[i] = engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
				}
				recs = withMismatchedKeys(recs, rng)
				cfg := *jobConfig(t, join)
				cfg.Errors.Policy, cfg.Errors.DLQTopic = config.PolicyDLQ, "oracle.dlq"
				cfg.State.BatchEvents = 1 + rng.Intn(500)
				// Fair fan-out shares time between keys (driver.Pacer): its
				// chunks depend on the clock, not on the input (issue 21 item
				// 5), so the byte-identical comparison does fan-outs at once.
				cfg.Skew.ChunkRows = -1
				base := runParallel(t, cfg, 1, recs, false)
				if base.letterCount < 6 {
					t.Fatalf("seed %d: %d dead letters, want at least 6: the mismatched keys were not rejected", seed, base.letterCount)
				}
				if base.changeCount == 0 || len(base.final) == 0 {
					t.Fatalf("seed %d: no changes: the test would prove nothing", seed)
				}
				for _, p := range []int{2, 4, 7} {
					got := runParallel(t, cfg, p, recs, false)
					for _, c := range []struct {
						what       string
						want, have []byte
					}{
						{"changes", base.changes, got.changes},
						{"dead letters", base.letters, got.letters},
						{"final join", base.final, got.final},
						{"state", base.state, got.state},
					} {
						if !bytes.Equal(c.want, c.have) {
							t.Fatalf("seed %d (reproduce with -seed %d): parallelism %d: %s differ from parallelism 1 (batch_events %d):\n%s",
								seed, seed, p, c.what, cfg.State.BatchEvents, firstDiff(c.want, c.have))
						}
					}
				}
				t.Logf("seed %d: %d records, %d changes, %d dead letters, state %s: identical at parallelism 1, 2, 4, 7",
					seed, len(recs), base.changeCount, base.letterCount, base.state)
			})
		}
	}
}

// firstDiff shows the first line where a and b differ.
func firstDiff(a, b []byte) string {
	if n, x, y, ok := testkit.FirstLineDiff(string(a), string(b)); ok {
		return fmt.Sprintf("line %d:\n- %s\n+ %s", n, x, y)
	}
	return "(equal lines, different bytes)"
}
