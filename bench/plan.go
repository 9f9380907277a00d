package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
)

// Shapes RunPlan benchmarks.
const (
	// ShapeChain is the chain, users ⋈ domains ⋈ dns_records
	// (ChainQuery), on a cdcgen multi-table history.
	ShapeChain = "chain"
	// ShapeStar is the fact with two dimensions, domains ⋈ users
	// ⋈ registrars (StarQuery), on a cdcgen multi-table history.
	ShapeStar = "star"
)

// ChainQuery is the chain benchmark's query (INNER at both joins, so that
// every peer computes the same rows).
const ChainQuery = `SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name,
       r.id AS record_id, r.rtype, r.ttl
FROM users u
JOIN domains d ON d.user_id = u.id
JOIN dns_records r ON r.domain_id = d.id`

// ChainTwoQuery is the two-table join of the chain's first two tables: the
// baseline the chain's cost per input record is compared with.
const ChainTwoQuery = `SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name
FROM users u
JOIN domains d ON d.user_id = u.id`

// StarQuery is the star benchmark's query: the fact (domains) joined with
// its two dimensions, INNER at both joins.
const StarQuery = `SELECT d.id AS domain_id, d.domain_name, u.id AS user_id, u.firstname, u.lastname,
       g.id AS registrar_id, g.name AS registrar
FROM domains d
JOIN users u ON u.id = d.user_id
JOIN registrars g ON g.id = d.registrar_id`

// StarTables is the star's schema for a snapshot of rows source rows:
// users (1/5 of them, REPLICA IDENTITY FULL), registrars (1/50, FULL) and
// domains (the rest: about four per user and 39 per registrar, user_id
// never NULL, registrar_id NULL for 1/8, REPLICA IDENTITY DEFAULT); every
// table has an unprojected note column.
func StarTables(rows int64) []cdcgen.MultiTable {
	t := cdcgen.Schema4()
	users, registrars, domains := t[0], t[1], t[2]
	users.Rows = int(max(1, rows/5))
	registrars.Rows = int(max(1, rows/50))
	domains.Rows = int(max(1, rows-int64(users.Rows)-int64(registrars.Rows)))
	return []cdcgen.MultiTable{users, registrars, domains}
}

// ChainTables is the chain's schema for a snapshot of rows source rows:
// users (1/7 of them, REPLICA IDENTITY FULL), domains (2/7: two per user
// on average, user_id never NULL) and dns_records (4/7: two per domain,
// domain_id NULL for 1/8), both REPLICA IDENTITY DEFAULT; every table has
// an unprojected note column.
func ChainTables(rows int64) []cdcgen.MultiTable {
	t := cdcgen.Schema4()
	users, domains, records := t[0], t[2], t[3]
	domains.Columns = slices.DeleteFunc(slices.Clone(domains.Columns), func(c cdcgen.MultiColumn) bool { return c.Name == "registrar_id" })
	users.Rows = int(max(1, rows/7))
	domains.Rows = int(max(1, 2*rows/7))
	records.Rows = int(max(1, rows-int64(users.Rows)-int64(domains.Rows)))
	return []cdcgen.MultiTable{users, domains, records}
}

// ChainHistory generates the chain benchmark's history: o.Workload.Rows
// snapshot rows (ChainTables), then o.Workload.CDCEvents streaming
// operations spread evenly over the three tables (inserts, updates, FK
// moves, deletes, re-creates, PK changes, children before parents), with
// schemas off, o.Workload.Partitions partitions per topic, 2% of rounds
// redelivered; no truncates, TOAST placeholders or snapshot rerun (which
// the peers cannot read). Records[:Stats.Snapshot] are the snapshot.
func ChainHistory(o Options) (*cdcgen.MultiHistory, error) {
	return shapeHistory(o, ChainTables(o.withDefaults().Workload.Rows))
}

// StarHistory is ChainHistory over StarTables (the operations spread
// evenly over users, registrars and domains).
func StarHistory(o Options) (*cdcgen.MultiHistory, error) {
	return shapeHistory(o, StarTables(o.withDefaults().Workload.Rows))
}

// shapeHistory is the history of ChainHistory's settings over tables.
func shapeHistory(o Options, tables []cdcgen.MultiTable) (*cdcgen.MultiHistory, error) {
	o = o.withDefaults()
	w := o.Workload
	ops := w.CDCEvents
	if ops == 0 {
		ops = max(w.Rows/5, 20000)
	}
	mo := cdcgen.MultiOptions{Seed: w.Seed, Tables: tables, Rows: 1, Ops: int(ops),
		Partitions: w.Partitions, SchemaMode: cdcgen.SchemaOff, Redeliver: 0.02}
	return cdcgen.GenerateMulti(mo)
}

// ChainJob is the job of sql over the tables it names (of the chain's and
// the star's: cdcgen.Schema4), with the
// state in stateDir and o's state settings (block cache, batch, sync,
// memtable, row cache and bulk load memory when set); rowByRow turns the
// bulk snapshot load off.
func ChainJob(o Options, sql, stateDir string, rowByRow bool) (*config.Config, error) {
	var b strings.Builder
	b.WriteString("name: bench\ntables:\n")
	for _, t := range cdcgen.Schema4() {
		if strings.Contains(sql, " "+t.Name+" ") {
			fmt.Fprintf(&b, "  %s: {topic: %s, key: id}\n", t.Name, t.Topic())
		}
	}
	b.WriteString("query: |\n")
	for _, l := range strings.Split(sql, "\n") {
		b.WriteString("  " + l + "\n")
	}
	bulk := ""
	switch {
	case rowByRow:
		bulk = ", bulk_load_mb: -1"
	case o.BulkLoadMB != 0:
		bulk = fmt.Sprintf(", bulk_load_mb: %d", o.BulkLoadMB)
	}
	if o.MemTableMB != 0 {
		bulk += fmt.Sprintf(", memtable_mb: %d", o.MemTableMB)
	}
	if o.RowCacheMB != 0 {
		bulk += fmt.Sprintf(", row_cache_mb: %d", o.RowCacheMB)
	}
	fmt.Fprintf(&b, "state: {dir: %q, cache_mb: %d, batch_events: %d, sync: %t%s}\n", stateDir, o.CacheMB, o.BatchEvents, o.Sync, bulk)
	return config.Parse([]byte(b.String()), "bench-chain.yaml")
}

// PlanSystem is one configuration RunPlan times.
type PlanSystem struct {
	Name  string `json:"name"`
	Query string `json:"query"`
	// Core is "parent/child" (the two-table join) or "plan" (stage.Pipeline).
	Core string `json:"core"`
	// RowByRow: the snapshot is applied record by record (bulk_load_mb
	// -1); else it is bulk loaded (both cores).
	RowByRow bool `json:"row_by_row"`
	// Topics are the tables it reads; SnapshotRecords and CDCRecords the
	// history's records of those topics (tombstones included).
	Topics          []string `json:"topics"`
	SnapshotRecords int64    `json:"snapshot_records"`
	CDCRecords      int64    `json:"cdc_records"`
	SourceRows      int64    `json:"source_rows"`
	FinalRows       int64    `json:"final_rows"`
	// Medians over the rounds.
	SnapshotRecordsPerSecond float64 `json:"snapshot_records_per_second"`
	SnapshotCPUMicros        float64 `json:"snapshot_cpu_us_per_record"`
	CDCRecordsPerSecond      float64 `json:"cdc_records_per_second"`
	CDCCPUMicros             float64 `json:"cdc_cpu_us_per_record"`
	CDCChangesPerRecord      float64 `json:"cdc_changes_per_record"`
	StateBytesPerRow         float64 `json:"state_bytes_per_source_row"`
	FanoutRows               int64   `json:"fanout_rows"`
	FanoutChanges            int64   `json:"fanout_changes"`
	FanoutMillis             float64 `json:"fanout_ms"`
}

// PlanRun is one timed run of a system.
type PlanRun struct {
	System          string  `json:"system"`
	Round           int     `json:"round"`
	SnapshotSeconds float64 `json:"snapshot_seconds"`
	SnapshotCPU     float64 `json:"snapshot_cpu_seconds"`
	CDCSeconds      float64 `json:"cdc_seconds"`
	CDCCPU          float64 `json:"cdc_cpu_seconds"`
	CDCChanges      int64   `json:"cdc_changes"`
	StateBytes      uint64  `json:"state_bytes"`
	FanoutChanges   int64   `json:"fanout_changes"`
	FanoutSeconds   float64 `json:"fanout_seconds"`
	LoadAvg         float64 `json:"loadavg_1m"`
}

// PlanReport is RunPlan's report.json.
type PlanReport struct {
	Shape     string         `json:"shape"`
	Seed      int64          `json:"seed"`
	Rows      int64          `json:"rows"`
	Stats     string         `json:"history"`
	Records   int64          `json:"records"`
	Rounds    int            `json:"rounds"`
	Machine   Machine        `json:"machine"`
	Systems   []PlanSystem   `json:"systems"`
	Runs      []PlanRun      `json:"runs"`
	Fanout    string         `json:"fanout"`
	Checked   string         `json:"checked"`
	Generated float64        `json:"generate_seconds"`
	Options   map[string]any `json:"options"`
}

// RunPlan benchmarks a multi-table plan (shape ShapeChain or ShapeStar)
// against the two-table join of users and domains on one generated history
// (ChainHistory or StarHistory), in memory:
// each round runs every system on a fresh state in the bench process —
// the two-table join of users and domains on the parent/child core (bulk
// snapshot, and row by row), the same query as a plan, and the chain
// (bulk snapshot, and row by row) —
// through engine.Run (decoding on one goroutine, joining on another, the
// changes counted and dropped), timing the snapshot and the CDC records
// separately (wall and process CPU), measuring the flushed state after
// the snapshot, and then the fan-out of one rename at the top of the
// largest subtree (chain: a user; star: a registrar for the star, a user
// for the two-table systems, which do not read registrars). Every run's final join must equal the join of
// the generator's final tables (an error otherwise). With rounds > 1 the
// systems alternate (interleaved), and the report has medians. It writes
// report.json and REPORT.md into o.Dir; cpuProfile, if set, receives the
// CPU profile of the chain's CDC records in its first round, and
// cpuProfile.snapshot that of its snapshot.
func RunPlan(ctx context.Context, o Options, shape string, rounds int, cpuProfile string) (*PlanReport, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if shape != ShapeChain && shape != ShapeStar {
		return nil, fmt.Errorf("cdcjoin: bench: shape %q: use %s or %s", shape, ShapeChain, ShapeStar)
	}
	if o.Pipeline != PipelineEngine || o.ClickHouse != "" || len(o.Sweep) > 0 || o.StormCompare {
		return nil, errors.New("cdcjoin: bench: --shape runs the replay path on one history (--rows): --pipeline kafka, --clickhouse, --sweep and --storm-compare do not apply")
	}
	if rounds < 1 {
		rounds = 1
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	o.progress(fmt.Sprintf("%s: generating the %s-row history", shape, formatRows(o.Workload.Rows)))
	t0 := time.Now()
	history, query, oracle := ChainHistory, ChainQuery, chainOracle
	if shape == ShapeStar {
		history, query, oracle = StarHistory, StarQuery, starOracle
	}
	h, err := history(o)
	if err != nil {
		return nil, err
	}
	rep := &PlanReport{Shape: shape, Seed: o.Workload.Seed, Rows: o.Workload.Rows, Stats: h.Stats.String(),
		Records: int64(len(h.Records)), Rounds: rounds, Machine: planMachine(o), Generated: time.Since(t0).Seconds(),
		Options: map[string]any{"cache_mb": o.CacheMB, "batch_events": o.BatchEvents, "sync": o.Sync, "partitions": o.Workload.Partitions}}
	systems := []*planSystem{
		{PlanSystem: PlanSystem{Name: "two-table", Query: ChainTwoQuery, Core: "parent/child"}},
		{PlanSystem: PlanSystem{Name: "two-table-rows", Query: ChainTwoQuery, Core: "parent/child", RowByRow: true}},
		{PlanSystem: PlanSystem{Name: "two-table-plan", Query: ChainTwoQuery, Core: "plan"}},
		{PlanSystem: PlanSystem{Name: shape, Query: query, Core: "plan"}},
		{PlanSystem: PlanSystem{Name: shape + "-rows", Query: query, Core: "plan", RowByRow: true}},
	}
	// rename is the two-table systems' change at the top of the tree, and
	// the chain's; topRename the star's (a registrar).
	var rename, topRename engine.Record
	if shape == ShapeChain {
		top, r, err := chainRename(h)
		if err != nil {
			return nil, err
		}
		rename, topRename = r, r
		rep.Fanout = fmt.Sprintf("one update of users.id=%d (firstname and lastname changed), the user with the most dns_records below it in the final tables", top)
	} else {
		users, r, err := starRename(h, "users")
		if err != nil {
			return nil, err
		}
		regs, g, err := starRename(h, "registrars")
		if err != nil {
			return nil, err
		}
		rename, topRename = r, g
		rep.Fanout = fmt.Sprintf("two-table systems: one update of users.id=%d (firstname and lastname changed), the user with the most domains in the final tables; star systems: one update of registrars.id=%d (name changed), the registrar with the most domains", users, regs)
	}
	for _, s := range systems {
		s.rename = rename
		if s.Query == query {
			s.rename = topRename
		}
		if err := s.prepare(o, h, oracle); err != nil {
			return nil, err
		}
	}
	for round := 1; round <= rounds; round++ {
		for _, s := range systems {
			prof := ""
			if round == 1 && s.Name == shape {
				prof = cpuProfile
			}
			run, err := s.run(ctx, o, filepath.Join(o.Dir, "state-"+s.Name), s.rename, prof)
			if err != nil {
				return nil, fmt.Errorf("cdcjoin: bench: %s round %d: %w", s.Name, round, err)
			}
			run.Round, run.LoadAvg = round, loadAvg()
			rep.Runs = append(rep.Runs, run)
			o.progress(fmt.Sprintf("%s: round %d/%d: %s: snapshot %.0f records/s (%.1f CPU µs/record), cdc %.0f records/s (%.1f CPU µs/record), fan-out %d changes",
				shape, round, rounds, s.Name, float64(s.SnapshotRecords)/run.SnapshotSeconds, 1e6*run.SnapshotCPU/float64(s.SnapshotRecords),
				float64(s.CDCRecords)/run.CDCSeconds, 1e6*run.CDCCPU/float64(s.CDCRecords), run.FanoutChanges))
		}
	}
	for _, s := range systems {
		s.summarize(rep.Runs)
		rep.Systems = append(rep.Systems, s.PlanSystem)
	}
	rep.Checked = "every run's final join (engine.Final after the CDC records, before the fan-out) equals the query over the generator's final tables, as multisets of JSON rows"
	rep.Machine.LoadAvgEnd = loadAvg()
	return rep, rep.write(o.Dir)
}

// planSystem is a PlanSystem with its inputs.
type planSystem struct {
	PlanSystem
	snap, cdc []engine.Record
	want      []string      // the expected final rows, sorted JSON
	rename    engine.Record // the change at the top of the tree
}

// prepare selects s's records and computes its expected final join
// (oracle: chainOracle or starOracle, the shape's).
func (s *planSystem) prepare(o Options, h *cdcgen.MultiHistory, oracle func(cdcgen.MultiTables, []string) []string) error {
	cfg, err := ChainJob(o, s.Query, o.Dir, s.RowByRow)
	if err != nil {
		return err
	}
	topics := map[string]bool{}
	for _, n := range cfg.TableNames() {
		topics[cfg.Tables[n].Topic] = true
		s.Topics = append(s.Topics, cfg.Tables[n].Topic)
	}
	for i, r := range h.Records {
		if !topics[r.Topic] {
			continue
		}
		rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
		if i < h.Stats.Snapshot {
			s.snap = append(s.snap, rec)
			if r.Op == 'r' {
				s.SourceRows++
			}
		} else {
			s.cdc = append(s.cdc, rec)
		}
	}
	s.SnapshotRecords, s.CDCRecords = int64(len(s.snap)), int64(len(s.cdc))
	s.want = oracle(h.Final, cfg.TableNames())
	s.FinalRows = int64(len(s.want))
	return nil
}

// multiValue is a generated table's value as a row.Value.
func multiValue(v cdcgen.MultiValue) row.Value {
	switch {
	case v.Null:
		return row.Null()
	case v.Str:
		return row.String(v.Text)
	}
	return row.Int(v.Int)
}

// chainOracle is the chain's query (or its first join, for two tables)
// over the final tables, as sorted JSON rows in cdcjoin's --final shape.
func chainOracle(t cdcgen.MultiTables, tables []string) []string {
	val := multiValue
	// Columns (MultiRow index): users id 0, firstname 1, lastname 2;
	// domains id 0, user_id 1, domain_name 2; dns_records id 0,
	// domain_id 1, rtype 2, ttl 3.
	var out []string
	var buf []byte
	three := slices.Contains(tables, "dns_records")
	byDomain := map[int64][]cdcgen.MultiRow{}
	if three {
		for _, r := range t["dns_records"] {
			if !r[1].Null {
				byDomain[r[1].Int] = append(byDomain[r[1].Int], r)
			}
		}
	}
	names2 := []string{"user_id", "firstname", "lastname", "domain_id", "domain_name"}
	names3 := append(slices.Clone(names2), "record_id", "rtype", "ttl")
	for _, d := range t["domains"] {
		if d[1].Null {
			continue
		}
		u, ok := t["users"][d[1].Int]
		if !ok {
			continue
		}
		vals := []row.Value{val(u[0]), val(u[1]), val(u[2]), val(d[0]), val(d[2])}
		if !three {
			buf = row.AppendJSONObject(buf[:0], names2, vals)
			out = append(out, string(buf))
			continue
		}
		for _, r := range byDomain[d[0].Int] {
			buf = row.AppendJSONObject(buf[:0], names3, append(vals, val(r[0]), val(r[2]), val(r[3])))
			out = append(out, string(buf))
		}
	}
	slices.Sort(out)
	return out
}

// starOracle is the star's query (or, for users and domains only, the
// two-table join ChainTwoQuery) over StarHistory's final tables, as
// sorted JSON rows in cdcjoin's --final shape.
func starOracle(t cdcgen.MultiTables, tables []string) []string {
	val := multiValue
	// Columns (MultiRow index): users id 0, firstname 1, lastname 2;
	// registrars id 0, name 1; domains id 0, user_id 1, registrar_id 2,
	// domain_name 3.
	star := slices.Contains(tables, "registrars")
	names2 := []string{"user_id", "firstname", "lastname", "domain_id", "domain_name"}
	names3 := []string{"domain_id", "domain_name", "user_id", "firstname", "lastname", "registrar_id", "registrar"}
	var out []string
	var buf []byte
	for _, d := range t["domains"] {
		if d[1].Null {
			continue
		}
		u, ok := t["users"][d[1].Int]
		if !ok {
			continue
		}
		if !star {
			buf = row.AppendJSONObject(buf[:0], names2, []row.Value{val(u[0]), val(u[1]), val(u[2]), val(d[0]), val(d[3])})
			out = append(out, string(buf))
			continue
		}
		if d[2].Null {
			continue
		}
		g, ok := t["registrars"][d[2].Int]
		if !ok {
			continue
		}
		buf = row.AppendJSONObject(buf[:0], names3, []row.Value{val(d[0]), val(d[3]), val(u[0]), val(u[1]), val(u[2]), val(g[0]), val(g[1])})
		out = append(out, string(buf))
	}
	slices.Sort(out)
	return out
}

// starRename picks the row of table (users or registrars) with the most
// domains in StarHistory's final tables and returns an update of it
// changing its names (firstname and lastname, or name).
func starRename(h *cdcgen.MultiHistory, table string) (int64, engine.Record, error) {
	col := 1 // domains' user_id
	changes := map[string]string{"firstname": "Renamed", "lastname": "Fanout"}
	if table == "registrars" {
		col, changes = 2, map[string]string{"name": "Renamed"}
	}
	per := map[int64]int{}
	for _, d := range h.Final["domains"] {
		if !d[col].Null {
			per[d[col].Int]++
		}
	}
	var top int64
	best := -1
	for id, n := range per {
		if _, live := h.Final[table][id]; live && (n > best || n == best && id < top) {
			top, best = id, n
		}
	}
	if best < 0 {
		return 0, engine.Record{}, fmt.Errorf("cdcjoin: bench: star: no row of %s with domains in the final tables", table)
	}
	topic := ""
	for _, t := range cdcgen.Schema4() {
		if t.Name == table {
			topic = t.Topic()
		}
	}
	rec, err := updateRecord(h, topic, top, changes)
	return top, rec, err
}

// chainRename picks the user with the most dns_records below it in the
// final tables and returns an update of that user changing its names (a
// users record after the history's last one on its partition).
func chainRename(h *cdcgen.MultiHistory) (int64, engine.Record, error) {
	perDomain := map[int64]int{}
	for _, r := range h.Final["dns_records"] {
		if !r[1].Null {
			perDomain[r[1].Int]++
		}
	}
	perUser := map[int64]int{}
	for _, d := range h.Final["domains"] {
		if !d[1].Null {
			perUser[d[1].Int] += perDomain[d[0].Int]
		}
	}
	var top int64
	best := -1
	for id, n := range perUser {
		if _, live := h.Final["users"][id]; live && (n > best || n == best && id < top) {
			top, best = id, n
		}
	}
	if best < 0 {
		return 0, engine.Record{}, errors.New("cdcjoin: bench: chain: no user with domains in the final tables")
	}
	rec, err := updateRecord(h, ChainTables(10)[0].Topic(), top, map[string]string{"firstname": "Renamed", "lastname": "Fanout"})
	return top, rec, err
}

// updateRecord returns an update of row id of topic's table setting the
// text columns in changes (a record after the history's last one on its
// partition, built from the row's last record, which carries its current
// row).
func updateRecord(h *cdcgen.MultiHistory, topic string, top int64, changes map[string]string) (engine.Record, error) {
	var last *cdcgen.Record
	offsets := map[int32]int64{}
	for i := range h.Records {
		r := &h.Records[i]
		if r.Topic != topic {
			continue
		}
		offsets[r.Partition] = max(offsets[r.Partition], r.Offset+1)
		if r.Value != nil && bytes.Contains(r.Key, fmt.Appendf(nil, `"id":%d}`, top)) {
			last = r
		}
	}
	if last == nil {
		return engine.Record{}, fmt.Errorf("cdcjoin: bench: no record of %s id=%d", topic, top)
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(last.Value, &env); err != nil {
		return engine.Record{}, fmt.Errorf("cdcjoin: bench: %s id=%d: %w", topic, top, err)
	}
	var after map[string]json.RawMessage
	if err := json.Unmarshal(env["after"], &after); err != nil || after == nil {
		return engine.Record{}, fmt.Errorf("cdcjoin: bench: %s id=%d: no after image (%v)", topic, top, err)
	}
	env["before"] = env["after"]
	for c, v := range changes {
		after[c], _ = json.Marshal(v)
	}
	a, _ := json.Marshal(after)
	env["after"], env["op"] = a, json.RawMessage(`"u"`)
	v, err := json.Marshal(env)
	if err != nil {
		return engine.Record{}, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	return engine.Record{Topic: topic, Partition: last.Partition, Offset: offsets[last.Partition], Key: last.Key, Value: v}, nil
}

// run is one timed run of s on a fresh state in dir.
func (s *planSystem) run(ctx context.Context, o Options, dir string, rename engine.Record, cpuProfile string) (run PlanRun, err error) {
	run.System = s.Name
	if err := os.RemoveAll(dir); err != nil {
		return run, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	defer os.RemoveAll(dir)
	cfg, err := ChainJob(o, s.Query, dir, s.RowByRow)
	if err != nil {
		return run, err
	}
	if s.Core == "plan" && cfg.Plan() == nil {
		cfg = cfg.AsPlan()
	}
	if got := cfg.Plan() != nil; got != (s.Core == "plan") {
		return run, fmt.Errorf("cdcjoin: bench: %s: compiled to the wrong core (plan: %t)", s.Name, got)
	}
	sink := &countSink{}
	eng, err := engine.Open(cfg, engine.Options{Sink: sink})
	if err != nil {
		return run, err
	}
	defer func() {
		if cerr := eng.Close(); err == nil {
			err = cerr
		}
	}()
	feed := func(recs []engine.Record) func(func(*engine.Record) error) error {
		return func(yield func(*engine.Record) error) error {
			for i := range recs {
				if err := yield(&recs[i]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	snapProfile := ""
	if cpuProfile != "" {
		snapProfile = cpuProfile + ".snapshot"
	}
	stopSnap, err := profilePhase(snapProfile)
	if err != nil {
		return run, err
	}
	defer func() { _ = stopSnap() }() // on an early return
	sw := startWatch()
	if err := eng.Run(ctx, feed(s.snap)); err != nil {
		return run, err
	}
	if err := eng.Commit(ctx); err != nil {
		return run, err
	}
	run.SnapshotSeconds, run.SnapshotCPU = sw.elapsed()
	if err := stopSnap(); err != nil {
		return run, err
	}
	if err := eng.Store().Flush(); err != nil {
		return run, fmt.Errorf("cdcjoin: bench: flush state: %w", err)
	}
	run.StateBytes = eng.Store().DiskBytes()
	// The profile covers the CDC records (the snapshot's: profilePhase).
	stopProfile, err := profilePhase(cpuProfile)
	if err != nil {
		return run, err
	}
	defer func() { _ = stopProfile() }() // on an early return
	before := sink.n
	sw = startWatch()
	if err := eng.Run(ctx, feed(s.cdc)); err != nil {
		return run, err
	}
	if err := eng.Commit(ctx); err != nil {
		return run, err
	}
	run.CDCSeconds, run.CDCCPU = sw.elapsed()
	if err := stopProfile(); err != nil {
		return run, err
	}
	run.CDCChanges = int64(sink.n - before)
	if err := s.check(eng, cfg.OutputNames()); err != nil {
		return run, err
	}
	before = sink.n
	t0 := time.Now()
	if err := eng.Process(ctx, &rename); err != nil {
		return run, err
	}
	if err := eng.Commit(ctx); err != nil {
		return run, err
	}
	run.FanoutSeconds = time.Since(t0).Seconds()
	run.FanoutChanges = int64(sink.n - before)
	return run, nil
}

// profilePhase starts a CPU profile into file (none if file is empty) and
// returns the function that stops it and closes the file (idempotent).
func profilePhase(file string) (func() error, error) {
	if file == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: bench: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cdcjoin: bench: cpu profile: %w", err)
	}
	done := false
	return func() error {
		if done {
			return nil
		}
		done = true
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("cdcjoin: bench: %w", err)
		}
		return nil
	}, nil
}

// check compares eng's final join with s.want.
func (s *planSystem) check(eng *engine.Engine, names []string) error {
	var got []string
	var buf []byte
	if err := eng.Final(func(_, _ []row.Value, vals []row.Value) error {
		buf = row.AppendJSONObject(buf[:0], names, vals)
		got = append(got, string(buf))
		return nil
	}); err != nil {
		return err
	}
	slices.Sort(got)
	if slices.Equal(got, s.want) {
		return nil
	}
	i := 0
	for i < len(got) && i < len(s.want) && got[i] == s.want[i] {
		i++
	}
	first := func(xs []string) string {
		if i < len(xs) {
			return xs[i]
		}
		return "(end)"
	}
	return fmt.Errorf("cdcjoin: bench: %s: final join differs from the query over the final tables: %d rows, want %d; first difference: got %s, want %s",
		s.Name, len(got), len(s.want), first(got), first(s.want))
}

// summarize fills s's medians from its runs.
func (s *planSystem) summarize(runs []PlanRun) {
	var sr, sc, cr, cc, ch, sb, fm []float64
	for _, r := range runs {
		if r.System != s.Name {
			continue
		}
		sr = append(sr, float64(s.SnapshotRecords)/r.SnapshotSeconds)
		sc = append(sc, 1e6*r.SnapshotCPU/float64(s.SnapshotRecords))
		cr = append(cr, float64(s.CDCRecords)/r.CDCSeconds)
		cc = append(cc, 1e6*r.CDCCPU/float64(s.CDCRecords))
		ch = append(ch, float64(r.CDCChanges)/float64(s.CDCRecords))
		sb = append(sb, float64(r.StateBytes)/float64(s.SourceRows))
		fm = append(fm, 1e3*r.FanoutSeconds)
		s.FanoutChanges = r.FanoutChanges
	}
	med := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return median(xs)
	}
	s.SnapshotRecordsPerSecond, s.SnapshotCPUMicros = med(sr), med(sc)
	s.CDCRecordsPerSecond, s.CDCCPUMicros, s.CDCChangesPerRecord = med(cr), med(cc), med(ch)
	s.StateBytesPerRow, s.FanoutMillis = med(sb), med(fm)
}

// write writes report.json and REPORT.md into dir.
func (r *PlanReport) write(dir string) error {
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("cdcjoin: bench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(j, '\n'), 0o644); err != nil {
		return fmt.Errorf("cdcjoin: bench: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "REPORT.md"), []byte(r.markdown()), 0o644)
}

func (r *PlanReport) markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# cdcjoin bench --shape %s: %s rows\n\n", r.Shape, formatRows(r.Rows))
	p("One generated history (seed %d, %d records: %s), generated in %.0f s; %d round(s), systems interleaved, each on a fresh pebble state (%v), in the bench process; medians. Machine: %s; load (1 min) %.2f at the start, %.2f at the end.\n\n",
		r.Seed, r.Records, r.Stats, r.Generated, r.Rounds, r.Options, r.Machine.Note, r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd)
	p("| system | core | snapshot | snapshot records/s | snapshot CPU µs/record | CDC records | CDC records/s | CDC CPU µs/record | changes/CDC record | state B/source row | final rows | fan-out changes | fan-out ms |\n")
	p("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Systems {
		snap := "bulk"
		if s.RowByRow {
			snap = "row by row"
		}
		p("| %s | %s | %s | %.0f | %.1f | %d | %.0f | %.1f | %.2f | %.0f | %d | %d | %.1f |\n", s.Name, s.Core, snap,
			s.SnapshotRecordsPerSecond, s.SnapshotCPUMicros, s.CDCRecords, s.CDCRecordsPerSecond, s.CDCCPUMicros, s.CDCChangesPerRecord,
			s.StateBytesPerRow, s.FinalRows, s.FanoutChanges, s.FanoutMillis)
	}
	sys := map[string]PlanSystem{}
	for _, s := range r.Systems {
		sys[s.Name] = s
	}
	two, rows, chain, chainRows := sys["two-table"], sys["two-table-rows"], sys[r.Shape], sys[r.Shape+"-rows"]
	if two.Name != "" && rows.Name != "" && chain.Name != "" {
		p("\n%s ÷ two-table, CPU µs per input record: snapshot %.2f× (%.2f× against two-table-rows), CDC %.2f×.\n", r.Shape,
			chain.SnapshotCPUMicros/two.SnapshotCPUMicros, chain.SnapshotCPUMicros/rows.SnapshotCPUMicros, chain.CDCCPUMicros/two.CDCCPUMicros)
	}
	if chain.Name != "" && chainRows.Name != "" {
		p("\n%s's snapshot, bulk ÷ row by row, CPU µs per record: %.2f×.\n", r.Shape, chain.SnapshotCPUMicros/chainRows.SnapshotCPUMicros)
	}
	p("\nFan-out: %s.\n\nCorrectness: %s.\n\n", r.Fanout, r.Checked)
	p("| round | system | snapshot s | snapshot CPU s | CDC s | CDC CPU s | state bytes | fan-out changes | load (1 min) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Runs {
		p("| %d | %s | %.2f | %.2f | %.2f | %.2f | %d | %d | %.2f |\n", x.Round, x.System, x.SnapshotSeconds, x.SnapshotCPU, x.CDCSeconds, x.CDCCPU, x.StateBytes, x.FanoutChanges, x.LoadAvg)
	}
	query := ChainQuery
	if r.Shape == ShapeStar {
		query = StarQuery
	}
	p("\nQueries:\n\n```sql\n-- %s\n%s\n-- two-table, two-table-rows, two-table-plan\n%s\n```\n", r.Shape, query, ChainTwoQuery)
	return b.String()
}

func planMachine(o Options) Machine {
	m := describeMachine()
	m.Note = o.MachineNote
	return m
}

// writeChainJSONL writes ChainHistory(o) as replay files (snapshot.jsonl
// and cdc.jsonl) into dir and returns their paths and the history's counts.
func writeChainJSONL(o Options, dir string) ([]string, string, error) {
	h, err := ChainHistory(o)
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("cdcjoin: bench: %w", err)
	}
	parts := []struct {
		name string
		recs []cdcgen.Record
	}{{"snapshot.jsonl", h.Records[:h.Stats.Snapshot]}, {"cdc.jsonl", h.Records[h.Stats.Snapshot:]}}
	var files []string
	for _, part := range parts {
		name := filepath.Join(dir, part.name)
		if err := writeRecords(name, part.recs); err != nil {
			return nil, "", err
		}
		files = append(files, name)
	}
	return files, h.Stats.String(), nil
}

// writeRecords writes recs to name in the replay format.
func writeRecords(name string, recs []cdcgen.Record) error {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("cdcjoin: bench: %w", err)
	}
	w := cdcgen.NewJSONLWriter(f)
	for i := range recs {
		if err = w.Write(&recs[i]); err != nil {
			break
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("cdcjoin: bench: %w", cerr)
	}
	return err
}
