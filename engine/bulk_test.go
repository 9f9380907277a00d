package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// pairModel is a sinkModel that also remembers every (row, version) pair
// emitted: emitting a pair again must repeat its values (a replay after a
// crash reproduces what was emitted, never something else under the same
// version).
type pairModel struct {
	*sinkModel
	pairs map[string]string
}

func newPairModel() *pairModel {
	return &pairModel{sinkModel: newSinkModel(), pairs: map[string]string{}}
}

func (m *pairModel) emit(c *row.Change) error {
	k := fmt.Sprintf("%s@%d", rowKey(c), c.Version)
	v := fmt.Sprint(c.Op, c.Values)
	if old, ok := m.pairs[k]; ok && old != v {
		return fmt.Errorf("row %s emitted twice with different values: %s, then %s", k, old, v)
	}
	m.pairs[k] = v
	return m.sinkModel.emit(c)
}

// failingSink fails its Write after n changes (a crash in the middle of
// handing a load's rows to the sink), once.
type failingSink struct {
	next  sink.Sink
	n     int
	fired bool
}

var errInjected = errors.New("injected sink failure")

func (f *failingSink) Write(ctx context.Context, cs []row.Change) error {
	if !f.fired {
		if f.n < len(cs) {
			f.fired = true
			if err := f.next.Write(ctx, cs[:f.n]); err != nil {
				return err
			}
			return errInjected
		}
		f.n -= len(cs)
	}
	return f.next.Write(ctx, cs)
}
func (f *failingSink) Flush(ctx context.Context) error { return f.next.Flush(ctx) }
func (f *failingSink) Close() error                    { return nil }

// bulkHistory is a history whose snapshot is large next to its streaming
// part, with a failed and re-run snapshot.
func bulkHistory(t *testing.T, seed int64) *cdcgen.History {
	t.Helper()
	opts := cdcgen.DefaultOptions(seed)
	opts.Users, opts.Domains, opts.Ops = 1500, 3500, 3000
	if testing.Short() {
		opts.Users, opts.Domains, opts.Ops = 300, 700, 1000
	}
	h, err := cdcgen.Generate(opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// snapshotEnd is the index of the first record after the snapshot (the
// first that is not a snapshot read, tombstones aside).
func snapshotEnd(h *cdcgen.History) int {
	for i, r := range h.Records {
		if r.Op != 'r' && r.Op != 0 {
			return i
		}
	}
	return len(h.Records)
}

// TestBulkOracle: a new state loads the snapshot in bulk (the handover at
// the first streaming event), with crashes while loading, while handing
// the loaded rows to the sink, and right after the handover; the result
// equals the SQL join, INNER and LEFT, and a replay after a crash never
// emits a (row, version) pair with other values.
func TestBulkOracle(t *testing.T) {
	ss := seeds(t)
	if len(ss) > 10 {
		ss = ss[:10]
	}
	for _, join := range []string{"inner", "left"} {
		for _, seed := range ss {
			t.Run(fmt.Sprintf("%s/seed=%d", join, seed), func(t *testing.T) {
				t.Parallel()
				runBulkOracle(t, join, seed)
			})
		}
	}
}

func runBulkOracle(t *testing.T, join string, seed int64) {
	h := bulkHistory(t, seed)
	rng := rand.New(rand.NewSource(seed))
	cfg := jobConfig(t, join)
	cfg.State.BatchEvents = 1 + rng.Intn(300)
	cfg.State.BulkLoadMB = 1 // runs spill
	end := snapshotEnd(h)
	if end < 100 {
		t.Fatalf("seed %d: a snapshot of %d records proves little", seed, end)
	}
	model := newPairModel()
	fs := vfs.NewCrashableMem()
	ctx := context.Background()
	// The first changes to reach the sink are the load's rows: fail there.
	fail := &failingSink{next: sink.Func(model.emit), n: rng.Intn(500)}
	open := func(resume bool) *engine.Engine {
		e, err := engine.Open(cfg, engine.Options{Resume: resume, Sink: fail, FS: fs})
		if err != nil {
			t.Fatalf("seed %d: open: %v", seed, err)
		}
		return e
	}
	crash := func(e *engine.Engine) *engine.Engine {
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
		e.Close()
		fs = crashed
		model.crashed = true
		return open(true)
	}
	e := open(false)
	defer func() { e.Close() }()
	if !e.Loading() {
		t.Fatal("a new state does not bulk load")
	}
	var loaded uint64 // records bulk loaded by the instance that handed over
	// Crash while loading (the sink failing while the load's rows go to it
	// is the other crash) and just after the handover.
	crashAt := map[int]bool{rng.Intn(end): true, end + 1 + rng.Intn(20): true}
	for i := 0; i < len(h.Records); i++ {
		if crashAt[i] {
			delete(crashAt, i)
			e = crash(e)
			i = -1
			continue
		}
		wasLoading := e.Loading()
		r := h.Records[i]
		rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		err := e.Process(ctx, &rec)
		if errors.Is(err, errInjected) {
			if !wasLoading {
				t.Fatal("the sink failed outside the load's handover")
			}
			e = crash(e)
			i = -1
			continue
		}
		if err != nil {
			t.Fatalf("seed %d: record %d: %v", seed, i, err)
		}
		if wasLoading && !e.Loading() {
			loaded = e.Stats().Bulk.Records
		}
		if i == end && e.Loading() {
			t.Fatalf("seed %d: still loading after the first streaming event", seed)
		}
	}
	if err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(crashAt) != 0 || !fail.fired {
		t.Fatalf("crash points not reached: %v, sink failure %v", crashAt, fail.fired)
	}
	if loaded == 0 {
		t.Fatal("the snapshot was not bulk loaded")
	}
	want := oracle(t, h.Final, join == "left")
	check(t, seed, "final sink model (bulk)", want, model.rmt.Live())
	check(t, seed, "final state (bulk)", want, materialized(t, e))
}

// snapshotRecords is a hand-made snapshot of users 1..3 and domains 10..13
// with an update that arrives while loading (streaming began on one
// partition while another's snapshot is still being read).
func snapshotRecords() []engine.Record {
	pt, ct := cdcgen.DefaultParentTopic, cdcgen.DefaultChildTopic
	user := func(op string, off int64, id int, first string) engine.Record {
		return engine.Record{Topic: pt, Partition: 0, Offset: off, Key: []byte(fmt.Sprintf(`{"id":%d}`, id)),
			Value: []byte(fmt.Sprintf(`{"op":%q,"after":{"id":%d,"firstname":%q,"lastname":"L"}}`, op, id, first))}
	}
	domain := func(op string, part int32, off int64, id, user int, name string) engine.Record {
		return engine.Record{Topic: ct, Partition: part, Offset: off, Key: []byte(fmt.Sprintf(`{"id":%d}`, id)),
			Value: []byte(fmt.Sprintf(`{"op":%q,"after":{"id":%d,"user_id":%d,"domain_name":%q}}`, op, id, user, name))}
	}
	return []engine.Record{
		user("r", 0, 1, "Egor"), user("r", 1, 2, "Pavel"),
		domain("r", 0, 0, 10, 1, "a"), domain("r", 0, 1, 11, 1, "b"),
		// Still in the load's unsorted runs: user 1 and domain 10, which
		// the next two streaming changes update and move.
		user("u", 2, 1, "Egor2"),
		domain("u", 0, 2, 10, 2, "a2"),
		// Partition 1 of domains is still being snapshotted.
		domain("r", 1, 0, 12, 1, "c"), user("r", 3, 3, "Mitya"), domain("r", 1, 1, 13, 3, "d"),
	}
}

// TestBulkHandoverWithPendingKeys: a change for a row still in an
// unsorted run ends the load first, so it applies to the loaded row; the
// snapshot reads after it go the record-by-record way.
func TestBulkHandoverWithPendingKeys(t *testing.T) {
	for _, join := range []string{"inner", "left"} {
		t.Run(join, func(t *testing.T) {
			model := newPairModel()
			e, err := engine.Open(jobConfig(t, join), engine.Options{Sink: sink.Func(model.emit), FS: vfs.NewMem()})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			for i, r := range snapshotRecords() {
				if err := e.Process(ctx, &r); err != nil {
					t.Fatal(err)
				}
				if loading := e.Loading(); loading != (i < 4) {
					t.Fatalf("after record %d: loading %v", i, loading)
				}
			}
			if err := e.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			want := []string{
				"(1,11) [1 | Egor2 | L | 11 | b]", "(1,12) [1 | Egor2 | L | 12 | c]",
				"(2,10) [2 | Pavel | L | 10 | a2]", "(3,13) [3 | Mitya | L | 13 | d]",
			}
			var got []string
			for _, r := range model.rmt.Live() {
				got = append(got, r.String())
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("join after the handover:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if st := e.Stats(); st.Bulk.Records != 4 {
				t.Fatalf("%d records bulk loaded, want 4", st.Bulk.Records)
			}
		})
	}
}

// TestBulkEndsAtSnapshotLast: a record with source.snapshot "last" ends
// the load at once (the loaded rows reach the sink without waiting for a
// streaming event).
func TestBulkEndsAtSnapshotLast(t *testing.T) {
	model := newPairModel()
	e, err := engine.Open(jobConfig(t, "inner"), engine.Options{Sink: sink.Func(model.emit), FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	recs := snapshotRecords()[:4]
	recs[3].Value = []byte(strings.Replace(string(recs[3].Value), `"op":"r"`, `"op":"r","source":{"snapshot":"last"}`, 1))
	for _, r := range recs {
		if err := e.Process(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	if e.Loading() || len(model.rmt.Live()) != 2 {
		t.Fatalf("loading %v, %d rows emitted after snapshot=last", e.Loading(), len(model.rmt.Live()))
	}
}

// TestBulkNegativeControl: the bulk oracle comparison can fail: a snapshot
// read lost on the way into the load is detected.
func TestBulkNegativeControl(t *testing.T) {
	opts := cdcgen.DefaultOptions(77)
	opts.Ops, opts.Mix.TruncateUsers, opts.Mix.TruncateDomains = 200, 0, 0
	opts.SnapshotRerun = false // a re-sent copy would mask the dropped read
	h, err := cdcgen.Generate(opts)
	if err != nil {
		t.Fatal(err)
	}
	end := snapshotEnd(h)
	want := oracle(t, h.Final, false)
	for drop := 0; drop < end; drop++ {
		r := h.Records[drop]
		if r.Value == nil || r.Topic != cdcgen.DefaultChildTopic || r.Dup {
			continue
		}
		if d := cdcgen.Diff(want, replayDropping(t, h, drop), 3); d != "" {
			t.Logf("dropping snapshot record %d is detected:\n%s", drop, d)
			return
		}
	}
	t.Fatal("no dropped snapshot read was ever detected: the comparison cannot fail")
}

// TestBulkReplayRepeatsVersions: a load whose handover failed half way
// through the sink, after an OS crash (unsynced writes lost) and a restart
// an hour later, emits again exactly the (row, version, values) it had
// emitted: the version clock was made durable before loading.
func TestBulkReplayRepeatsVersions(t *testing.T) {
	h := bulkHistory(t, 5)
	end := snapshotEnd(h)
	cfg := jobConfig(t, "left")
	fs := vfs.NewCrashableMem()
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	first := map[string]string{}
	fail := &failingSink{n: 700, next: sink.Func(func(c *row.Change) error {
		first[fmt.Sprintf("%s@%d", rowKey(c), c.Version)] = fmt.Sprint(c.Values)
		return nil
	})}
	e, err := engine.Open(cfg, engine.Options{Sink: fail, FS: fs, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= end; i++ {
		r := h.Records[i]
		rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		if err = e.Process(ctx, &rec); err != nil {
			break
		}
	}
	if !errors.Is(err, errInjected) || len(first) != 700 {
		t.Fatalf("the handover did not fail after 700 rows: %v, %d rows", err, len(first))
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	e.Close()
	second := map[string]string{}
	e, err = engine.Open(cfg, engine.Options{Resume: true, FS: crashed, Now: func() time.Time { return now.Add(time.Hour) },
		Sink: sink.Func(func(c *row.Change) error {
			second[fmt.Sprintf("%s@%d", rowKey(c), c.Version)] = fmt.Sprint(c.Values)
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i := 0; i <= end; i++ {
		r := h.Records[i]
		rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		if err := e.Process(ctx, &rec); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range first {
		if second[k] != v {
			t.Fatalf("row %s: emitted %s before the crash, %q after", k, v, second[k])
		}
	}
}

// replayDropping replays h on a new state (INNER join) without record drop
// and returns what the sink model shows at the end.
func replayDropping(t *testing.T, h *cdcgen.History, drop int) []cdcgen.JoinedRow {
	t.Helper()
	model := newSinkModel()
	e, err := engine.Open(jobConfig(t, "inner"), engine.Options{Sink: sink.Func(model.emit), FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	for i, r := range h.Records {
		if i == drop {
			continue
		}
		rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		if err := e.Process(ctx, &rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return model.rmt.Live()
}
