package cdcgen

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Multi-table histories: the generator behind the oracle tests of
// multi-table plans (package stage, engine, kafkarun). A schema of any
// number of tables, each with an int64 key `id`, foreign keys to other
// tables (nullable or not), text and integer columns and one unprojected
// `note` column; every hard case of the two-table generator at every
// table: snapshot (with a rerun), FK moves and FKs set to NULL, deletes
// and re-creates, PK changes (delete + tombstone + create, possibly on
// other partitions), truncates (alone in their round when there are
// several partitions), children before their parents, REPLICA IDENTITY
// DEFAULT (before = null, deletes with the key only), TOAST placeholders
// for unchanged text columns, redelivered suffixes, schemas on, off or
// mixed, several partitions interleaved. The ground truth is the tables
// themselves (MultiHistory.Final and at checkpoints), for a real SQL
// engine to run the query on.

// MultiColumnKind is a generated column's type.
type MultiColumnKind uint8

// Column kinds of a multi-table schema.
const (
	MultiText MultiColumnKind = iota + 1 // text, from small vocabularies (quotes, unicode, '' and 'NULL' included)
	MultiInt                             // integer (int32)
	MultiRef                             // bigint: a foreign key to Ref's id
)

// MultiColumn is one column of a generated table (besides id).
type MultiColumn struct {
	Name     string
	Kind     MultiColumnKind
	Ref      string   // MultiRef: the referenced table
	Nullable bool     // NULL sometimes
	Values   []string // MultiText: the vocabulary (default: names)
}

// MultiTable is one generated table.
type MultiTable struct {
	Name    string
	Columns []MultiColumn
	// Full: REPLICA IDENTITY FULL (before images); otherwise DEFAULT.
	Full bool
	// Rows, if > 0, is this table's snapshot size instead of
	// MultiOptions.Rows (e.g. more children than parents).
	Rows int
}

// Topic is the table's Debezium topic.
func (t *MultiTable) Topic() string { return "dbserver1.public." + t.Name }

var (
	multiFirst  = []string{"Egor", "Pavel", "Mitya", "Zoë", "Quo\"ted", "Back\\slash", "明", "D'Arcy", "", "NULL"}
	multiLast   = []string{"Myasnik", "Hvastun", "Volk", "O'Brien", "Müller", "Line\nBreak", "Emoji😀", "x"}
	multiDomain = []string{"a.com", "b.org", "c.net", "bücher.com", "x_y.com", "50%.com", "e.io", "f.com", "g.de"}
	multiRtype  = []string{"A", "AAAA", "TXT", "MX", "CNAME"}
	multiReg    = []string{"Gandi", "Namecheap", "RU-CENTER", "name'o", "Tucows"}
)

// Schema4 is the four-table schema of the oracle tests: users; registrars;
// domains (user_id → users, registrar_id → registrars, nullable);
// dns_records (domain_id → domains, nullable; rtype; ttl). users and
// registrars have REPLICA IDENTITY FULL, domains and dns_records DEFAULT.
func Schema4() []MultiTable {
	return []MultiTable{
		{Name: "users", Full: true, Columns: []MultiColumn{
			{Name: "firstname", Kind: MultiText, Values: multiFirst},
			{Name: "lastname", Kind: MultiText, Nullable: true, Values: multiLast}}},
		{Name: "registrars", Full: true, Columns: []MultiColumn{
			{Name: "name", Kind: MultiText, Values: multiReg}}},
		{Name: "domains", Columns: []MultiColumn{
			{Name: "user_id", Kind: MultiRef, Ref: "users"},
			{Name: "registrar_id", Kind: MultiRef, Ref: "registrars", Nullable: true},
			{Name: "domain_name", Kind: MultiText, Values: multiDomain}}},
		{Name: "dns_records", Columns: []MultiColumn{
			{Name: "domain_id", Kind: MultiRef, Ref: "domains", Nullable: true},
			{Name: "rtype", Kind: MultiText, Values: multiRtype},
			{Name: "ttl", Kind: MultiInt, Nullable: true}}},
	}
}

// MultiOptions configures a multi-table history. Zero values are
// documented defaults; DefaultMultiOptions turns every hard case on.
type MultiOptions struct {
	Seed   int64
	Tables []MultiTable // default Schema4()
	// Rows is each table's snapshot size; Ops the streaming operations.
	Rows, Ops int
	// Partitions per topic (default 1).
	Partitions int
	SchemaMode SchemaMode
	// Redeliver is the probability that a round ends with a connector
	// restart re-sending a suffix of it; Toast the probability that an
	// unchanged text column of a REPLICA IDENTITY DEFAULT update is sent
	// as the placeholder.
	Redeliver, Toast float64
	// Truncates turns TRUNCATE on (about one per 150 operations).
	Truncates bool
	// SnapshotRerun re-sends a prefix of the snapshot.
	SnapshotRerun bool
	MaxRoundOps   int // default 8
	// StateEvery keeps the DB state of every StateEvery-th checkpoint in
	// MultiHistory.States (0: none; Final is always kept).
	StateEvery int
	// Hot is the probability that a foreign key drawn for a row refers
	// to id 1 of its table (a hot key: that parent gets a large share of
	// the children) instead of a live id drawn uniformly; 0 (the default)
	// draws nothing for it, so that histories of other options do not
	// change.
	Hot float64
}

// DefaultMultiOptions has every hard case on.
func DefaultMultiOptions(seed int64) MultiOptions {
	return MultiOptions{Seed: seed, Rows: 30, Ops: 3000, Partitions: 3, SchemaMode: SchemaMixed,
		Redeliver: 0.05, Toast: 0.3, Truncates: true, SnapshotRerun: true}
}

// MultiValue is a generated value: NULL, an integer or a text.
type MultiValue struct {
	Null bool
	Int  int64
	Text string
	Str  bool // Text is set (else Int)
}

// SQL renders v as a PostgreSQL literal.
func (v MultiValue) SQL() string {
	switch {
	case v.Null:
		return "NULL"
	case v.Str:
		return "'" + strings.ReplaceAll(v.Text, "'", "''") + "'"
	}
	return strconv.FormatInt(v.Int, 10)
}

// MultiRow is a row: id, then the table's columns in order, then note.
type MultiRow []MultiValue

// MultiTables is a DB state: per table, id → row.
type MultiTables map[string]map[int64]MultiRow

func (t MultiTables) clone() MultiTables {
	out := MultiTables{}
	for name, rows := range t {
		m := make(map[int64]MultiRow, len(rows))
		for id, r := range rows {
			m[id] = slices.Clone(r)
		}
		out[name] = m
	}
	return out
}

// SQL returns statements that create the tables (in schema s) and load
// state t into them.
func (t MultiTables) SQL(tables []MultiTable, s string) []string {
	var out []string
	for _, tb := range tables {
		cols := []string{"id bigint PRIMARY KEY"}
		for _, c := range tb.Columns {
			typ := "text"
			switch c.Kind {
			case MultiInt:
				typ = "integer"
			case MultiRef:
				typ = "bigint"
			}
			cols = append(cols, c.Name+" "+typ)
		}
		cols = append(cols, "note text")
		out = append(out, fmt.Sprintf("CREATE TABLE %s.%s (%s)", s, tb.Name, strings.Join(cols, ", ")))
		ids := make([]int64, 0, len(t[tb.Name]))
		for id := range t[tb.Name] {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for start := 0; start < len(ids); start += 500 {
			var vals []string
			for _, id := range ids[start:min(start+500, len(ids))] {
				r := t[tb.Name][id]
				parts := make([]string, len(r))
				for i, v := range r {
					parts[i] = v.SQL()
				}
				vals = append(vals, "("+strings.Join(parts, ", ")+")")
			}
			out = append(out, fmt.Sprintf("INSERT INTO %s.%s VALUES %s", s, tb.Name, strings.Join(vals, ", ")))
		}
	}
	return out
}

// MultiHistory is a generated multi-table history.
type MultiHistory struct {
	Options MultiOptions
	Records []Record
	// Checkpoints are consumed-prefix lengths after which the records
	// describe exactly one DB state: States[i] (nil unless kept: see
	// MultiOptions.StateEvery).
	Checkpoints []int
	States      []MultiTables
	Final       MultiTables
	Stats       MultiStats

	gen *multiGen // AppendUpdate's generator
}

// AppendUpdate appends one round to h: an update of row id of table that
// sets column col to v (no TOAST placeholder; the note column changes too,
// as every update's does), ending at a checkpoint; Final and Stats follow.
// The row must be live in h.Final, and v other than its value. For tests
// that need a change at a known key after the rest of a history (a hot
// key's fan-out over the children it has by then).
func (h *MultiHistory) AppendUpdate(table string, id int64, col string, v MultiValue) error {
	g := h.gen
	ti, ok := g.index[table]
	if !ok {
		return fmt.Errorf("cdcjoin: cdcgen: no table %s", table)
	}
	t := &g.tables[ti]
	c := slices.IndexFunc(t.Columns, func(c MultiColumn) bool { return c.Name == col })
	if c < 0 {
		return fmt.Errorf("cdcjoin: cdcgen: no column %s.%s", table, col)
	}
	old, ok := g.state[table][id]
	if !ok {
		return fmt.Errorf("cdcjoin: cdcgen: %s id %d is not live", table, id)
	}
	if old[c+1] == v {
		return fmt.Errorf("cdcjoin: cdcgen: %s id %d has %s = %s already", table, id, col, v.SQL())
	}
	g.opNo++
	g.txID++
	g.ts += int64(1 + g.rng.IntN(50))
	r := slices.Clone(old)
	r[c+1] = v
	r[len(r)-1] = MultiValue{Str: true, Text: "note" + strconv.Itoa(g.rng.IntN(1000))}
	g.put(table, id, r)
	var before MultiRow
	if t.Full {
		before = old
	} else {
		h.Stats.BeforeNull++
	}
	g.emit(g.record(t, 'u', id, before, r, nil, g.schemaFor()))
	h.Stats.Updates++
	g.flushRound(true)
	h.Final = g.state.clone()
	h.Stats.Records = len(h.Records)
	return nil
}

// MultiStats counts the hard cases a history contains.
type MultiStats struct {
	Records, Snapshot, SnapshotReruns, Inserts, Updates, Deletes, Tombstones, Truncates   int
	FKMoves, FKNulls, Orphans, PKChanges, PKChangesCross, Recreates, Toasted, Redelivered int
	UnselectedUpdates, BeforeNull, KeyOnlyDeletes                                         int
}

type multiGen struct {
	o       MultiOptions
	rng     *rand.Rand
	tables  []MultiTable
	index   map[string]int
	state   MultiTables
	next    map[string]int64   // next fresh id
	gone    map[string][]int64 // deleted ids (re-creation candidates)
	h       *MultiHistory
	queues  [][]Record // per (table, partition): the round's records
	round   []Record   // produced order
	roundOp []int
	opNo    int
	lsn     int64
	txID    int64
	ts      int64
	offs    []int64
	// truncate is 1 + the table to truncate at the next round's start.
	truncate int
	live     map[string]*liveSet
}

// GenerateMulti builds a whole multi-table history in memory.
func GenerateMulti(o MultiOptions) (*MultiHistory, error) {
	if o.Tables == nil {
		o.Tables = Schema4()
	}
	if o.Partitions == 0 {
		o.Partitions = 1
	}
	if o.MaxRoundOps == 0 {
		o.MaxRoundOps = 8
	}
	g := &multiGen{o: o, rng: rand.New(rand.NewPCG(uint64(o.Seed), 0x6d756c7469)), tables: o.Tables,
		index: map[string]int{}, state: MultiTables{}, live: map[string]*liveSet{}, next: map[string]int64{}, gone: map[string][]int64{},
		h: &MultiHistory{Options: o}, lsn: 24_000_000, txID: 900, ts: 1_700_000_000_000}
	g.h.gen = g
	for i, t := range o.Tables {
		g.index[t.Name] = i
		g.state[t.Name] = map[int64]MultiRow{}
		g.next[t.Name] = 1
		for _, c := range t.Columns {
			if c.Kind == MultiRef {
				if _, ok := g.index[c.Ref]; !ok {
					if !slices.ContainsFunc(o.Tables, func(x MultiTable) bool { return x.Name == c.Ref }) {
						return nil, fmt.Errorf("cdcjoin: cdcgen: %s.%s references unknown table %s", t.Name, c.Name, c.Ref)
					}
				}
			}
		}
	}
	g.queues = make([][]Record, len(o.Tables)*o.Partitions)
	g.offs = make([]int64, len(o.Tables)*o.Partitions)
	g.snapshot()
	for g.opNo < o.Ops {
		g.streamRound()
	}
	g.h.Final = g.state.clone()
	g.h.Stats.Records = len(g.h.Records)
	return g.h, nil
}

func (g *multiGen) snapshot() {
	for _, t := range g.tables {
		n := g.o.Rows
		if t.Rows > 0 {
			n = t.Rows
		}
		for i := 0; i < n; i++ {
			id := g.next[t.Name]
			g.next[t.Name]++
			g.put(t.Name, id, g.newRow(&t, id, false))
		}
	}
	var snap []Record
	for ti := range g.tables {
		t := &g.tables[ti]
		ids := g.ids(t.Name)
		for _, id := range ids {
			snap = append(snap, g.record(t, 'r', id, nil, g.state[t.Name][id], nil, g.schemaFor()))
			g.h.Stats.Snapshot++
		}
	}
	if g.o.SnapshotRerun && len(snap) > 1 {
		k := 1 + g.rng.IntN(len(snap)-1)
		for _, r := range snap[:k] {
			r.Dup = true
			g.emit(r)
			g.h.Stats.SnapshotReruns++
		}
	}
	for _, r := range snap {
		g.emit(r)
	}
	g.flushRound(true)
}

func (g *multiGen) ids(table string) []int64 {
	ids := make([]int64, 0, len(g.state[table]))
	for id := range g.state[table] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// pick draws a live id of table, uniformly (O(1): a live set per table,
// kept in step with state by put and drop).
func (g *multiGen) pick(table string) (int64, bool) {
	l := g.live[table]
	if l == nil || len(l.ids) == 0 {
		return 0, false
	}
	return l.ids[g.rng.IntN(len(l.ids))], true
}

func (g *multiGen) put(table string, id int64, r MultiRow) {
	g.state[table][id] = r
	l := g.live[table]
	if l == nil {
		l = &liveSet{}
		g.live[table] = l
	}
	l.add(id)
}

func (g *multiGen) drop(table string, id int64) {
	delete(g.state[table], id)
	if l := g.live[table]; l != nil && l.has(id) {
		l.remove(id)
	}
}

func (g *multiGen) schemaFor() bool {
	switch g.o.SchemaMode {
	case SchemaOff:
		return false
	case SchemaMixed:
		return g.rng.IntN(2) == 0
	}
	return true
}

// value draws column c's value.
func (g *multiGen) value(c *MultiColumn, orphanOK bool) MultiValue {
	if c.Nullable && g.rng.IntN(8) == 0 {
		return MultiValue{Null: true}
	}
	switch c.Kind {
	case MultiText:
		vals := c.Values
		if vals == nil {
			vals = multiFirst
		}
		return MultiValue{Str: true, Text: vals[g.rng.IntN(len(vals))]}
	case MultiInt:
		return MultiValue{Int: int64(g.rng.IntN(7) * 300)}
	}
	if g.o.Hot > 0 && g.rng.Float64() < g.o.Hot {
		return MultiValue{Int: 1}
	}
	if orphanOK && g.rng.IntN(20) == 0 {
		// A child before its parent: a key not created yet.
		return MultiValue{Int: g.next[c.Ref] + int64(g.rng.IntN(3))}
	}
	if id, ok := g.pick(c.Ref); ok {
		return MultiValue{Int: id}
	}
	return MultiValue{Int: g.next[c.Ref]}
}

func (g *multiGen) newRow(t *MultiTable, id int64, orphans bool) MultiRow {
	r := MultiRow{{Int: id}}
	for i := range t.Columns {
		r = append(r, g.value(&t.Columns[i], orphans))
	}
	return append(r, MultiValue{Str: true, Text: "note" + strconv.Itoa(g.rng.IntN(1000))})
}

// streamRound runs 1..MaxRoundOps operations; a truncate runs alone.
func (g *multiGen) streamRound() {
	n := 1 + g.rng.IntN(g.o.MaxRoundOps)
	for i := 0; i < n && g.opNo < g.o.Ops; i++ {
		ti := g.rng.IntN(len(g.tables))
		if g.truncate > 0 {
			ti, g.truncate = g.truncate-1, 0
			g.op(&g.tables[ti], 't')
			if g.o.Partitions > 1 {
				break
			}
			continue
		}
		t := &g.tables[ti]
		if g.o.Truncates && g.rng.IntN(150) == 0 {
			if i > 0 && g.o.Partitions > 1 {
				g.truncate = ti + 1 // alone, at the start of the next round
				break
			}
			g.op(t, 't')
			if g.o.Partitions > 1 {
				break
			}
			continue
		}
		kinds := "iiiiiiuuuuuunmmmmfddddrrppoo"
		g.op(t, kinds[g.rng.IntN(len(kinds))])
	}
	if len(g.round) > 0 && g.o.Redeliver > 0 && g.rng.Float64() < g.o.Redeliver {
		from := g.roundOp[g.rng.IntN(len(g.roundOp))]
		var again []Record
		for i, r := range g.round {
			if g.roundOp[i] >= from {
				r.Dup = true
				again = append(again, r)
			}
		}
		for _, r := range again {
			g.emit(r)
			g.h.Stats.Redelivered++
		}
	}
	g.flushRound(true)
}

func (g *multiGen) refColumn(t *MultiTable) (int, bool) {
	var refs []int
	for i, c := range t.Columns {
		if c.Kind == MultiRef {
			refs = append(refs, i)
		}
	}
	if len(refs) == 0 {
		return 0, false
	}
	return refs[g.rng.IntN(len(refs))], true
}

// op runs one operation of kind k on t: i insert, u update of projected
// columns, n update of note only, m FK move, f FK set NULL, d delete, r
// re-create a deleted id, p PK change, o orphan insert, t truncate.
func (g *multiGen) op(t *MultiTable, k byte) {
	g.opNo++
	g.txID++
	g.ts += int64(1 + g.rng.IntN(50))
	rows := g.state[t.Name]
	id, have := g.pick(t.Name)
	switch k {
	case 'u', 'n', 'm', 'f', 'd', 'p':
		if !have {
			k = 'i'
		}
	case 'r':
		if len(g.gone[t.Name]) == 0 {
			k = 'i'
		}
	}
	if (k == 'm' || k == 'f') && !slices.ContainsFunc(t.Columns, func(c MultiColumn) bool { return c.Kind == MultiRef }) {
		k = 'u'
	}
	schema := g.schemaFor()
	switch k {
	case 'i', 'o', 'r':
		var nid int64
		if k == 'r' {
			gone := g.gone[t.Name]
			j := g.rng.IntN(len(gone))
			nid = gone[j]
			g.gone[t.Name] = slices.Delete(slices.Clone(gone), j, j+1)
			if _, live := rows[nid]; live {
				nid = g.next[t.Name]
				g.next[t.Name]++
			} else {
				g.h.Stats.Recreates++
			}
		} else {
			nid = g.next[t.Name]
			g.next[t.Name]++
		}
		r := g.newRow(t, nid, k == 'o')
		if k == 'o' {
			g.h.Stats.Orphans++
		}
		g.put(t.Name, nid, r)
		g.emit(g.record(t, 'c', nid, nil, r, nil, schema))
		g.h.Stats.Inserts++
	case 'u', 'n', 'm', 'f':
		old := rows[id]
		r := slices.Clone(old)
		switch k {
		case 'u':
			c := 1 + g.rng.IntN(len(t.Columns))
			for tries := 0; tries < 8 && t.Columns[c-1].Kind == MultiRef; tries++ {
				c = 1 + g.rng.IntN(len(t.Columns))
			}
			r[c] = g.value(&t.Columns[c-1], false)
		case 'n':
			r[len(r)-1] = MultiValue{Str: true, Text: "note" + strconv.Itoa(g.rng.IntN(1000))}
			g.h.Stats.UnselectedUpdates++
		case 'm':
			c, _ := g.refColumn(t)
			col := t.Columns[c]
			col.Nullable = false
			r[c+1] = g.value(&col, true)
			g.h.Stats.FKMoves++
		case 'f':
			c, _ := g.refColumn(t)
			if t.Columns[c].Nullable {
				r[c+1] = MultiValue{Null: true}
				g.h.Stats.FKNulls++
			} else {
				r[c+1] = g.value(&t.Columns[c], false)
				g.h.Stats.FKMoves++
			}
		}
		r[len(r)-1] = MultiValue{Str: true, Text: "note" + strconv.Itoa(g.rng.IntN(1000))}
		rows[id] = r
		var toast []bool
		if !t.Full && g.o.Toast > 0 {
			toast = make([]bool, len(r))
			for i, c := range t.Columns {
				if c.Kind == MultiText && old[i+1] == r[i+1] && !r[i+1].Null && g.rng.Float64() < g.o.Toast {
					toast[i+1] = true
					g.h.Stats.Toasted++
				}
			}
		}
		var before MultiRow
		if t.Full {
			before = old
		} else {
			g.h.Stats.BeforeNull++
		}
		g.emit(g.record(t, 'u', id, before, r, toast, schema))
		g.h.Stats.Updates++
	case 'd':
		old := rows[id]
		g.drop(t.Name, id)
		g.gone[t.Name] = append(g.gone[t.Name], id)
		g.delete(t, id, old, schema)
	case 'p':
		old := rows[id]
		g.drop(t.Name, id)
		g.gone[t.Name] = append(g.gone[t.Name], id)
		nid := g.next[t.Name]
		g.next[t.Name]++
		r := slices.Clone(old)
		r[0] = MultiValue{Int: nid}
		g.put(t.Name, nid, r)
		g.delete(t, id, old, schema)
		g.emit(g.record(t, 'c', nid, nil, r, nil, schema))
		g.h.Stats.PKChanges++
		if g.partition(id) != g.partition(nid) {
			g.h.Stats.PKChangesCross++
		}
	case 't':
		clear(rows)
		if l := g.live[t.Name]; l != nil {
			l.clear()
		}
		rec := g.record(t, 't', 0, nil, nil, nil, schema)
		rec.Key = nil
		rec.Partition = int32(g.rng.IntN(g.o.Partitions))
		g.emit(rec)
		g.h.Stats.Truncates++
	}
}

func (g *multiGen) delete(t *MultiTable, id int64, old MultiRow, schema bool) {
	before := old
	if !t.Full {
		before = MultiRow{{Int: id}}
		for _, c := range t.Columns {
			if c.Kind == MultiRef && !c.Nullable {
				before = append(before, MultiValue{Int: 0}) // NOT NULL: Debezium's zero value
			} else {
				before = append(before, MultiValue{Null: true})
			}
		}
		before = append(before, MultiValue{Null: true})
		g.h.Stats.KeyOnlyDeletes++
	}
	g.emit(g.record(t, 'd', id, before, nil, nil, schema))
	g.h.Stats.Deletes++
	tomb := g.record(t, 'd', id, nil, nil, nil, schema)
	tomb.Value, tomb.Op = nil, 0
	g.emit(tomb)
	g.h.Stats.Tombstones++
}

func (g *multiGen) partition(id int64) int {
	return int((murmur2([]byte(`{"id":`+strconv.FormatInt(id, 10)+`}`)) & 0x7fffffff) % uint32(g.o.Partitions))
}

// emit adds r to its partition's queue of the round.
func (g *multiGen) emit(r Record) {
	g.round = append(g.round, r)
	g.roundOp = append(g.roundOp, g.opNo)
}

// flushRound assigns offsets and merges the round's partitions into the
// consumption order (each partition's order kept, a uniformly random
// merge), ending at a checkpoint.
func (g *multiGen) flushRound(checkpoint bool) {
	for i := range g.queues {
		g.queues[i] = g.queues[i][:0]
	}
	for _, r := range g.round {
		tp := g.index[strings.TrimPrefix(r.Topic, "dbserver1.public.")]*g.o.Partitions + int(r.Partition)
		r.Offset = g.offs[tp]
		g.offs[tp]++
		g.queues[tp] = append(g.queues[tp], r)
	}
	var order []int
	for tp, q := range g.queues {
		for range q {
			order = append(order, tp)
		}
	}
	g.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	heads := make([]int, len(g.queues))
	for _, tp := range order {
		g.h.Records = append(g.h.Records, g.queues[tp][heads[tp]])
		heads[tp]++
	}
	g.round, g.roundOp = g.round[:0], g.roundOp[:0]
	if checkpoint && len(order) > 0 {
		g.h.Records[len(g.h.Records)-1].Checkpoint = true
		g.h.Checkpoints = append(g.h.Checkpoints, len(g.h.Records))
		g.h.States = append(g.h.States, nil)
		if g.o.StateEvery > 0 && len(g.h.States)%g.o.StateEvery == 1 {
			g.h.States[len(g.h.States)-1] = g.state.clone()
		}
	}
}

// record encodes a Debezium record of t.
func (g *multiGen) record(t *MultiTable, op byte, id int64, before, after MultiRow, toast []bool, schemaOn bool) Record {
	g.lsn += 8
	var key []byte
	if op != 't' {
		k := []byte(`{"id":` + strconv.FormatInt(id, 10) + `}`)
		if schemaOn {
			k = append([]byte(`{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],"optional":false,"name":"`+t.Topic()+`.Key"},"payload":`), k...)
			k = append(k, '}')
		}
		key = k
	}
	var v []byte
	v = append(v, `{"before":`...)
	v = appendMultiRow(v, t, before, nil)
	v = append(v, `,"after":`...)
	v = appendMultiRow(v, t, after, toast)
	snap := "false"
	if op == 'r' {
		snap = "true"
	}
	v = append(v, `,"source":{"version":"3.6.1.Final","connector":"postgresql","name":"dbserver1","ts_ms":`...)
	v = strconv.AppendInt(v, g.ts, 10)
	v = append(v, `,"snapshot":"`+snap+`","db":"shop","schema":"public","table":"`+t.Name+`","txId":`...)
	v = strconv.AppendInt(v, g.txID, 10)
	v = append(v, `,"lsn":`...)
	v = strconv.AppendInt(v, g.lsn, 10)
	v = append(v, `},"op":"`+string(op)+`","ts_ms":`...)
	v = strconv.AppendInt(v, g.ts, 10)
	v = append(v, '}')
	if schemaOn {
		v = append(append([]byte(`{"schema":`+multiSchema(t)+`,"payload":`), v...), '}')
	}
	part := 0
	if op != 't' {
		part = g.partition(id)
	}
	return Record{Topic: t.Topic(), Partition: int32(part), Key: key, Value: v, Op: op, TsMs: g.ts}
}

func appendMultiRow(b []byte, t *MultiTable, r MultiRow, toast []bool) []byte {
	if r == nil {
		return append(b, "null"...)
	}
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, r[0].Int, 10)
	names := []string{}
	for _, c := range t.Columns {
		names = append(names, c.Name)
	}
	names = append(names, "note")
	for i, name := range names {
		v := r[i+1]
		b = append(b, ',')
		b = appendJSONString(b, name)
		b = append(b, ':')
		switch {
		case toast != nil && toast[i+1]:
			b = append(b, `"__debezium_unavailable_value"`...)
		case v.Null:
			b = append(b, "null"...)
		case v.Str:
			b = appendJSONString(b, v.Text)
		default:
			b = strconv.AppendInt(b, v.Int, 10)
		}
	}
	return append(b, '}')
}

func multiSchema(t *MultiTable) string {
	fields := []string{`{"type":"int64","optional":false,"field":"id"}`}
	for _, c := range t.Columns {
		typ := "string"
		switch c.Kind {
		case MultiInt:
			typ = "int32"
		case MultiRef:
			typ = "int64"
		}
		fields = append(fields, fmt.Sprintf(`{"type":%q,"optional":%v,"field":%q}`, typ, c.Nullable || c.Kind == MultiText, c.Name))
	}
	fields = append(fields, `{"type":"string","optional":true,"field":"note"}`)
	row := `{"type":"struct","fields":[` + strings.Join(fields, ",") + `],"optional":true,"name":"` + t.Topic() + `.Value","field":"%s"}`
	src := `{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"}`
	return `{"type":"struct","fields":[` + fmt.Sprintf(row, "before") + "," + fmt.Sprintf(row, "after") + "," + src +
		`,{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"` + t.Topic() + `.Envelope"}`
}

// SortedStats renders the stats as "name=count" pairs, for logs.
func (s MultiStats) String() string {
	parts := []string{}
	for k, v := range map[string]int{"records": s.Records, "snapshot": s.Snapshot, "reruns": s.SnapshotReruns,
		"inserts": s.Inserts, "updates": s.Updates, "deletes": s.Deletes, "truncates": s.Truncates,
		"fk_moves": s.FKMoves, "fk_nulls": s.FKNulls, "orphans": s.Orphans, "pk_changes": s.PKChanges,
		"pk_cross": s.PKChangesCross, "recreates": s.Recreates, "toasted": s.Toasted, "redelivered": s.Redelivered,
		"unselected": s.UnselectedUpdates, "before_null": s.BeforeNull, "key_only_deletes": s.KeyOnlyDeletes} {
		parts = append(parts, k+"="+strconv.Itoa(v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
