package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

// seqSink models the insert-only sinks: rows by sequence number, a row
// re-emitted after a crash must be the same row.
type seqSink struct {
	t    testing.TB
	spec *timejoin.Spec
	rows map[uint64]string
}

func (s *seqSink) add(c *row.Change) error {
	if c.Op != row.Insert {
		s.t.Fatalf("op %v", c.Op)
	}
	txt := timegen.Text(s.spec, c.Values)
	if old, ok := s.rows[c.Version]; ok && old != txt {
		s.t.Fatalf("sequence %d re-emitted as %q, was %q", c.Version, txt, old)
	}
	s.rows[c.Version] = txt
	return nil
}

func (s *seqSink) sorted() []string {
	var out []string
	for seq := uint64(1); seq <= uint64(len(s.rows)); seq++ {
		r, ok := s.rows[seq]
		if !ok {
			s.t.Fatalf("sequence numbers have a gap at %d (%d rows)", seq, len(s.rows))
		}
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

type letters struct{ got []deadletter.Letter }

func (l *letters) DeadLetter(_ context.Context, x *deadletter.Letter) error {
	c := *x
	c.Key, c.Value = slices.Clone(x.Key), slices.Clone(x.Value)
	l.got = append(l.got, c)
	return nil
}

// TestTimeOracle replays seeded Debezium event histories (several
// partitions a side, keys reused, late records, idle partitions,
// redeliveries, NULL keys; temporal right sides with updates, moves,
// TOAST placeholders, deletes and truncates; schemas on and off, plain
// JSON events) through the engine, crashing and resuming a few times, and
// compares the emitted rows with the reference over the non-late events;
// every late record must be dead-lettered with reason late.
func TestTimeOracle(t *testing.T) {
	sd := timeSeed(t)
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	lateSeen := 0
	for round := 0; round < rounds; round++ {
		for _, kind := range []timejoin.Kind{timejoin.Interval, timejoin.Window, timejoin.Temporal} {
			for _, jt := range []timejoin.JoinType{timejoin.Inner, timejoin.LeftOuter, timejoin.RightOuter, timejoin.FullOuter} {
				if kind == timejoin.Temporal && jt > timejoin.LeftOuter {
					continue
				}
				rng := rand.New(rand.NewPCG(sd, uint64(round*100)+uint64(kind)*10+uint64(jt)))
				lateSeen += timeOracleRound(t, rng, kind, jt, round%2 == 0)
				if t.Failed() {
					t.Fatalf("seed %d round %d", sd, round)
				}
			}
		}
	}
	if lateSeen == 0 {
		t.Error("no history had a late record")
	}
}

// timeSeed is a random seed, or CDCJOIN_SEED's; logged.
func timeSeed(t *testing.T) uint64 {
	sd := uint64(rand.Int64())
	if v := os.Getenv("CDCJOIN_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		sd = n
	}
	t.Logf("seed %d (CDCJOIN_SEED=%d to reproduce)", sd, sd)
	return sd
}

func timeOracleRound(t *testing.T, rng *rand.Rand, kind timejoin.Kind, jt timejoin.JoinType, schemas bool) int {
	r := replayTime(t, rng, kind, jt, schemas, false)
	want, wantLate := timegen.Expected(r.spec, r.events, true, nil, r.end)
	if !slices.Equal(r.got, want) || !slices.Equal(r.late, wantLate) {
		t.Errorf("%s %s (schemas %v, plain %v, end %v): %d rows, %d late; want %d rows, %d late\n%s", kind, jt, schemas, r.plain, r.end,
			len(r.got), len(r.late), len(want), len(wantLate), r.yaml)
		for _, d := range diff(r.got, want) {
			t.Error(d)
		}
		t.Errorf("late got %v\nwant %v", r.late, wantLate)
	}
	t.Logf("%s %s: %d rows, %d late, %d duplicates, %d commits", kind, jt, len(r.got), r.stats.Late, r.stats.Duplicates, r.stats.Commits)
	return len(wantLate)
}

// timeReplay is one seeded history replayed through the engine.
type timeReplay struct {
	spec   *timejoin.Spec
	events []timegen.Event
	got    []string // the emitted rows as timegen.Text renders them, sorted
	late   []int    // the events dead-lettered as late, in order
	end    bool     // the replay ended the input
	plain  bool     // the left side was plain JSON events
	yaml   string
	stats  engine.TimeStats
}

// replayTime generates a history of kind and jt (1500 events, random
// bounds, out_of_orderness, lateness and idleness) and replays it through
// the engine with a fake insert-only sink and dead-letter writer,
// crashing (losing the batch in progress) and resuming twice; the input
// is ended (EndOfInput) when end is set, else at random.
func replayTime(t *testing.T, rng *rand.Rand, kind timejoin.Kind, jt timejoin.JoinType, schemas, end bool) timeReplay {
	const ms = 1000
	s := timegen.RandomSpec(rng, kind, jt, []int64{0, 40 * ms})
	events := timegen.Generate(rng, timegen.Options{Kind: kind, N: 1500, OutOfOrderness: s.OutOfOrderness / ms, Scale: ms})
	plain := kind != timejoin.Temporal && rng.IntN(3) == 0
	recs := timegen.Encode(events, timegen.EncodeOptions{Schemas: schemas, PlainLeft: plain, Temporal: kind == timejoin.Temporal, Seed: rng.Uint64()})
	yaml := timegen.Config(timegen.ConfigOptions{Name: "tj", Spec: s, TimeSource: kind == timejoin.Temporal && rng.IntN(2) == 0,
		PlainLeft: plain, StateDir: "/state", DLQ: true})
	yaml = strings.Replace(yaml, "state: {dir: \"/state\"}", fmt.Sprintf("state: {dir: \"/state\", batch_events: %d}", 20+rng.IntN(200)), 1)
	cfg, err := config.Parse([]byte(yaml), "tj.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, yaml)
	}
	fs := vfs.NewMem()
	out := &seqSink{t: t, spec: s, rows: map[uint64]string{}}
	dl := &letters{}
	crashes := map[int]bool{rng.IntN(len(recs)): true, rng.IntN(len(recs)): true}
	end = rng.IntN(2) == 0 || end
	ctx := context.Background()
	open := func(resume bool) *engine.TimeEngine {
		e, err := engine.OpenTime(cfg, engine.Options{FS: fs, Resume: resume, Sink: sink.Func(out.add), DeadLetters: dl})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open(false)
	for i := 0; i < len(recs); i++ {
		if crashes[i] {
			delete(crashes, i)
			e.Close() // the batch in progress is lost
			e = open(true)
			i = -1 // from the start: committed records are skipped
			continue
		}
		r := recs[i]
		if err := e.Process(ctx, &engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if end {
		if err := e.EndOfInput(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	e.Close()
	// Letters of late records, by event (a replayed batch dead-letters
	// its late records again: a set).
	lateEv := map[int]bool{}
	for _, l := range dl.got {
		if l.Kind != deadletter.ReasonLate || l.Late == nil {
			t.Errorf("a bad record that is not late: %s %v", l.Kind, l.Err)
			continue
		}
		for _, r := range recs {
			if r.Topic == l.Topic && r.Partition == l.Partition && r.Offset == l.Offset {
				lateEv[r.Event] = true
			}
		}
	}
	var gotLate []int
	for i := range events {
		if lateEv[i] {
			gotLate = append(gotLate, i)
		}
	}
	return timeReplay{spec: s, events: events, got: out.sorted(), late: gotLate, end: end, plain: plain, yaml: yaml, stats: st}
}

// diff lists the rows only in a or only in b (sorted inputs).
func diff(a, b []string) []string {
	var out []string
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			out = append(out, "  extra   "+a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, "  missing "+b[j])
			j++
		default:
			i++
			j++
		}
		if len(out) > 20 {
			break
		}
	}
	return out
}
