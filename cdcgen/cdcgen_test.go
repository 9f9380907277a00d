package cdcgen

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
)

func TestMurmur2MatchesKafka(t *testing.T) {
	// Vectors from Kafka's UtilsTest.testMurmur2.
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range cases {
		if got := int32(murmur2([]byte(in))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestDecimalBase64(t *testing.T) {
	for _, c := range []struct {
		v    int64
		want string
	}{{0, "AA=="}, {1, "AQ=="}, {-1, "/w=="}, {127, "fw=="}, {128, "AIA="}, {-128, "gA=="}, {-129, "/38="}, {12345, "MDk="}, {1 << 62, "QAAAAAAAAAA="}} {
		got := string(appendDecimalBase64(nil, c.v))
		if got != `"`+c.want+`"` {
			t.Errorf("decimal %d: got %s, want %q", c.v, got, c.want)
		}
		if back := decodeDecimal(t, c.want, 0); back != fmt.Sprint(c.v) {
			t.Errorf("decimal %d: round trip gives %s", c.v, back)
		}
	}
	if got := string(appendDecimalText(nil, -5, 2)); got != "-0.05" {
		t.Errorf("decimal text -5/100 = %q", got)
	}
}

func TestOptionsValidation(t *testing.T) {
	o := DefaultOptions(1)
	o.Toast = 2
	o.Partitions = -1
	o.ParentTopic, o.ChildTopic = "x", "x"
	_, err := NewGenerator(o)
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"Toast", "Partitions", "differ"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, err := Generate(Options{}); err != nil {
		t.Fatalf("zero options: %v", err)
	}
}

func jsonlBytes(t testing.TB, recs []Record) []byte {
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, recs); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDeterminism(t *testing.T) {
	o := DefaultOptions(42)
	o.Ops = 3000
	a, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(o)
	if !bytes.Equal(jsonlBytes(t, a.Records), jsonlBytes(t, b.Records)) {
		t.Fatal("same seed gave different bytes")
	}
	// The streaming form (reused buffers) gives the same bytes.
	var stream bytes.Buffer
	if _, err := StreamJSONL(&stream, o); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stream.Bytes(), jsonlBytes(t, a.Records)) {
		t.Fatal("StreamJSONL differs from Generate")
	}
	o.Seed = 43
	c, _ := Generate(o)
	if bytes.Equal(jsonlBytes(t, a.Records), jsonlBytes(t, c.Records)) {
		t.Fatal("different seeds gave the same bytes")
	}
}

func TestJSONLLinesAreValid(t *testing.T) {
	o := DefaultOptions(5)
	o.Ops = 500
	h, _ := Generate(o)
	for i, line := range bytes.Split(bytes.TrimSuffix(jsonlBytes(t, h.Records), []byte("\n")), []byte("\n")) {
		var v struct {
			Topic     string          `json:"topic"`
			Partition int32           `json:"partition"`
			Offset    int64           `json:"offset"`
			Key       json.RawMessage `json:"key"`
			Value     json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		r := h.Records[i]
		if v.Topic != r.Topic || v.Partition != r.Partition || v.Offset != r.Offset {
			t.Fatalf("line %d: position mismatch", i)
		}
		if (r.Value == nil) != (string(v.Value) == "null") {
			t.Fatalf("line %d: value null mismatch", i)
		}
	}
}

func TestHardCasesOccur(t *testing.T) {
	h, err := Generate(DefaultOptions(1))
	if err != nil {
		t.Fatal(err)
	}
	s := h.Stats
	t.Logf("records=%d checkpoints=%d stats=%+v", len(h.Records), len(h.Checkpoints), s)
	counts := map[string]int{
		"snapshot records": s.SnapshotRecords, "snapshot rerun records": s.SnapshotReruns,
		"inserts": s.Inserts, "updates": s.Updates, "deletes": s.Deletes, "tombstones": s.Tombstones,
		"truncate events": s.Truncates, "updates with before=null": s.BeforeNull,
		"deletes with key-only before": s.BeforeKeyOnly, "toasted columns": s.ToastedColumns,
		"toasted projected columns": s.ToastedProjected, "redeliveries": s.Redeliveries,
		"redelivered records": s.Redelivered, "cross-partition PK changes": s.PKChangeCross,
		"FK moves without before": s.FKMovesNoBefore, "child before parent": s.ChildBeforeParent,
		"orphaned children": s.OrphanedChildren, "LSN going backwards": s.LSNBackwards,
		"multi-op transactions": s.MultiOpTx, "schema-on records": s.SchemaOnRecords,
		"schema-off records": s.SchemaOffRecords, "checkpoints": s.Checkpoints,
	}
	for name := range opNames {
		counts["op "+name] = s.Op(name)
	}
	for name, n := range counts {
		if n <= 0 {
			t.Errorf("hard case %q never occurs", name)
		}
	}
	if s.Records != len(h.Records) || s.Checkpoints != len(h.Checkpoints) {
		t.Errorf("stats say %d records / %d checkpoints, history has %d / %d", s.Records, s.Checkpoints, len(h.Records), len(h.Checkpoints))
	}
}

// consumer is an independent, naive reading of the records: it decodes them
// with encoding/json and applies them to tables, keeping stored values for
// TOAST placeholders.
type consumer struct {
	t       *testing.T
	users   map[int64]User
	domains map[int64]Domain
}

func decodeDecimal(t testing.TB, b64 string, scale int) string {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("decimal %q: %v", b64, err)
	}
	v := new(big.Int).SetBytes(raw)
	if len(raw) > 0 && raw[0]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(raw))))
	}
	if scale == 0 {
		return v.String()
	}
	return string(appendDecimalText(nil, v.Int64(), scale))
}

func (c *consumer) apply(r Record) {
	t := c.t
	if !json.Valid(r.Value) && r.Value != nil || r.Key != nil && !json.Valid(r.Key) {
		t.Fatalf("invalid JSON at %s/%d@%d", r.Topic, r.Partition, r.Offset)
	}
	if r.Value == nil {
		return // tombstone
	}
	var env map[string]any
	d := json.NewDecoder(bytes.NewReader(r.Value))
	d.UseNumber()
	if err := d.Decode(&env); err != nil {
		t.Fatal(err)
	}
	if p, ok := env["payload"]; ok {
		if _, ok := env["schema"].(map[string]any); !ok {
			t.Fatalf("payload without schema")
		}
		env = p.(map[string]any)
	}
	op := env["op"].(string)
	src := env["source"].(map[string]any)
	table := src["table"].(string)
	if op != string(r.Op) {
		t.Fatalf("op %q, record says %q", op, r.Op)
	}
	if op == "t" {
		if r.Key != nil {
			t.Fatalf("truncate with a key")
		}
		if table == "users" {
			clear(c.users)
		} else {
			clear(c.domains)
		}
		return
	}
	num := func(v any) int64 {
		n, err := v.(json.Number).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if op == "d" {
		before := env["before"].(map[string]any)
		if table == "users" {
			delete(c.users, num(before["id"]))
		} else {
			delete(c.domains, num(before["id"]))
		}
		return
	}
	after := env["after"].(map[string]any)
	id := num(after["id"])
	text := func(col string, old string, exists bool) string {
		s := after[col].(string)
		if s == "__debezium_unavailable_value" {
			// A re-sent toasted update may reach a row that a later,
			// already consumed, delete removed: the value is unknown until
			// the rest of the re-sent suffix arrives. Keep the placeholder;
			// checkpoint comparisons prove it does not survive.
			if op != "u" || !exists && !r.Dup {
				t.Fatalf("placeholder in %s.%s of op %s (row exists %v)", table, col, op, exists)
			}
			if exists {
				return old
			}
		}
		return s
	}
	if table == "users" {
		old, ok := c.users[id]
		u := User{ID: id, FirstName: text("firstname", old.FirstName, ok), LastName: text("lastname", old.LastName, ok),
			Email: text("email", old.Email, ok), Balance: decodeDecimal(t, after["balance"].(string), 2)}
		switch v := after["created_at"].(type) {
		case string:
			ts, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				t.Fatal(err)
			}
			u.CreatedAt = ts.UnixMicro()
		case json.Number:
			u.CreatedAt = num(v)
		}
		c.users[id] = u
	} else {
		old, ok := c.domains[id]
		c.domains[id] = Domain{ID: id, UserID: num(after["user_id"]), DomainName: text("domain_name", old.DomainName, ok),
			Price: decodeDecimal(t, after["price"].(string), 2)}
	}
}

func equalTables(t *testing.T, what string, want Tables, users map[int64]User, domains map[int64]Domain) {
	t.Helper()
	if len(want.Users) != len(users) || len(want.Domains) != len(domains) {
		t.Fatalf("%s: want %d users %d domains, consumer has %d / %d", what, len(want.Users), len(want.Domains), len(users), len(domains))
	}
	for id, u := range want.Users {
		if users[id] != u {
			t.Fatalf("%s: user %d: want %+v, consumer has %+v", what, id, u, users[id])
		}
	}
	for id, d := range want.Domains {
		if domains[id] != d {
			t.Fatalf("%s: domain %d: want %+v, consumer has %+v", what, id, d, domains[id])
		}
	}
}

// TestCheckpointsMatchDB consumes the records in order with an independent
// decoder and checks that at checkpoints the consumed state equals the DB
// state from the ground-truth log, and that offsets and partitioning hold.
func TestCheckpointsMatchDB(t *testing.T) {
	for _, mode := range []struct {
		name string
		edit func(*Options)
	}{
		{"default", func(o *Options) { o.Ops = 10000 }},
		{"one-partition-bursty-micro", func(o *Options) {
			o.Partitions, o.Interleave, o.CreatedAt, o.SchemaMode = 1, InterleaveBursty, MicroTimestamp, SchemaOff
		}},
		{"full-identity-childfirst", func(o *Options) {
			o.DomainsIdentity, o.Interleave, o.SchemaMode, o.Partitions, o.Ops = ReplicaFull, InterleaveChildFirst, SchemaOn, 4, 6000
		}},
		{"default-identity-skewed", func(o *Options) {
			o.UsersIdentity, o.ParentSkew, o.Ops, o.IDBase = ReplicaDefault, 1.3, 5000, 1<<40
		}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			o := DefaultOptions(7)
			mode.edit(&o)
			h, err := Generate(o)
			if err != nil {
				t.Fatal(err)
			}
			c := &consumer{t: t, users: map[int64]User{}, domains: map[int64]Domain{}}
			nextOff := map[string]int64{}
			cp := 0
			lastCp := 0
			for i, r := range h.Records {
				tp := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
				if r.Offset != nextOff[tp] {
					t.Fatalf("record %d: %s offset %d, want %d", i, tp, r.Offset, nextOff[tp])
				}
				nextOff[tp]++
				if r.Key != nil {
					var k struct {
						ID      *int64             `json:"id"`
						Payload struct{ ID int64 } `json:"payload"`
					}
					if err := json.Unmarshal(r.Key, &k); err != nil {
						t.Fatal(err)
					}
					id := k.Payload.ID
					if k.ID != nil {
						id = *k.ID
					}
					want := int(murmur2([]byte(fmt.Sprintf(`{"id":%d}`, id)))&0x7fffffff) % h.Options.Partitions
					if int(r.Partition) != want {
						t.Fatalf("record %d: key %d on partition %d, want %d", i, id, r.Partition, want)
					}
				}
				if r.Op == 't' && h.Options.Partitions > 1 && (i != lastCp || !r.Checkpoint) {
					// Redelivery may re-send the truncate within its round.
					if !r.Dup && i != lastCp {
						t.Fatalf("record %d: truncate not alone in its round", i)
					}
				}
				c.apply(r)
				if r.Checkpoint {
					lastCp = i + 1
					if h.Checkpoints[cp].Records != i+1 {
						t.Fatalf("checkpoint %d at %d, record %d says checkpoint", cp, h.Checkpoints[cp].Records, i)
					}
					if cp%17 == 0 || cp == len(h.Checkpoints)-1 {
						want, err := h.TablesAt(cp)
						if err != nil {
							t.Fatal(err)
						}
						equalTables(t, fmt.Sprintf("checkpoint %d (record %d)", cp, i), want, c.users, c.domains)
					}
					cp++
				}
			}
			if cp != len(h.Checkpoints) {
				t.Fatalf("saw %d checkpoints, history has %d", cp, len(h.Checkpoints))
			}
			equalTables(t, "final", h.Final, c.users, c.domains)
			if _, err := h.TablesAt(len(h.Checkpoints)); err == nil {
				t.Fatal("out-of-range checkpoint accepted")
			}
		})
	}
}

func exampleTables() (map[int64]User, map[int64]Domain) {
	users := map[int64]User{
		1: {ID: 1, FirstName: "Egor", LastName: "Myasnik"},
		2: {ID: 2, FirstName: "Pavel", LastName: "Hvastun"},
		3: {ID: 3, FirstName: "Mitya", LastName: "Volk"},
	}
	domains := map[int64]Domain{
		1: {ID: 1, UserID: 1, DomainName: "Approval"},
		2: {ID: 2, UserID: 1, DomainName: "Rejection"},
		3: {ID: 3, UserID: 1, DomainName: "Stoppage"},
		4: {ID: 4, UserID: 3, DomainName: "Cancellation"},
	}
	return users, domains
}

func TestJoinExample(t *testing.T) {
	users, domains := exampleTables()
	row := func(p, c string, vals ...string) JoinedRow {
		return JoinedRow{Key: RowKey{Parent: p, Child: c, Padded: c == ""}, Values: vals}
	}
	inner := []JoinedRow{
		row("1", "1", "1", "Egor", "Myasnik", "1", "Approval"),
		row("1", "2", "1", "Egor", "Myasnik", "2", "Rejection"),
		row("1", "3", "1", "Egor", "Myasnik", "3", "Stoppage"),
		row("3", "4", "3", "Mitya", "Volk", "4", "Cancellation"),
	}
	if d := Diff(inner, Join(users, domains, false), 0); d != "" {
		t.Errorf("inner join:\n%s", d)
	}
	left := append([]JoinedRow{}, inner[:3]...)
	left = append(left, row("2", "", "2", "Pavel", "Hvastun", Null, Null), inner[3])
	got := Join(users, domains, true)
	if d := Diff(left, got, 0); d != "" {
		t.Errorf("left join:\n%s", d)
	}
	for i := range left { // canonical order, not just the same set
		if got[i].Key != left[i].Key {
			t.Errorf("left join row %d is %s, want %s", i, got[i].Key, left[i].Key)
		}
	}
	if _, err := JoinSelect(users, domains, false, []string{"parent.nope"}); err == nil {
		t.Error("unknown column accepted")
	}
}

func TestDiffReadable(t *testing.T) {
	users, domains := exampleTables()
	want := Join(users, domains, true)
	got := Join(users, domains, true)
	got = got[1:]                                        // (1,1) missing
	got[0].Values = append([]string{}, got[0].Values...) // (1,2) different
	got[0].Values[4] = "Rejected"
	got = append(got, JoinedRow{Key: RowKey{Parent: "9", Child: "9"}, Values: []string{"9"}})
	d := Diff(want, got, 0)
	for _, s := range []string{"1 missing", "1 extra", "1 different", "- (1,1)", "+ (9,9)", "~ (1,2) want", "Rejected"} {
		if !strings.Contains(d, s) {
			t.Errorf("diff lacks %q:\n%s", s, d)
		}
	}
}

func TestKeyOrderIsNumeric(t *testing.T) {
	a := RowKey{Parent: "9", Child: "10"}
	b := RowKey{Parent: "10", Child: "2"}
	p := RowKey{Parent: "10", Padded: true}
	if a.Compare(b) >= 0 || p.Compare(b) >= 0 || b.Compare(p) <= 0 {
		t.Fatal("keys not in numeric order")
	}
	if compareKeyText("-5", "3") >= 0 || compareKeyText("-5", "-12") <= 0 {
		t.Fatal("negative keys misordered")
	}
}

func TestReplacingMergeTree(t *testing.T) {
	m := NewReplacingMergeTree()
	k1 := RowKey{Parent: "1", Child: "1"}
	k2 := RowKey{Parent: "1", Padded: true}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Apply(k1, 5, false, []string{"a"}))
	must(m.Apply(k1, 3, false, []string{"old"})) // stale: loses
	must(m.Apply(k2, 1, false, []string{"p"}))
	must(m.Apply(k2, 2, true, nil)) // retracted
	must(m.Apply(k1, 5, false, []string{"a"}))
	if m.Stale != 1 || m.Repeats != 1 {
		t.Fatalf("stale %d repeats %d", m.Stale, m.Repeats)
	}
	live := m.Live()
	if len(live) != 1 || live[0].Key != k1 || live[0].Values[0] != "a" {
		t.Fatalf("live = %v", live)
	}
	if err := m.Apply(k1, 5, false, []string{"b"}); err == nil || !strings.Contains(err.Error(), "version tie") {
		t.Fatalf("tie with different values: %v", err)
	}
	m.StrictTies = true
	if err := m.Apply(k1, 5, false, []string{"a"}); err == nil {
		t.Fatal("strict tie accepted")
	}
	must(m.Apply(k2, 7, false, []string{"back"}))
	if v, ok := m.Version(k2); !ok || v != 7 || len(m.Live()) != 2 {
		t.Fatalf("re-inserted row: version %d live %v", v, m.Live())
	}
}

func TestGeneratorBuffersAreReused(t *testing.T) {
	o := DefaultOptions(3)
	o.Ops = 2000
	g, err := NewGenerator(o)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := Generate(o)
	for i := 0; ; i++ {
		r, ok := g.Next()
		if !ok {
			if i != len(h.Records) {
				t.Fatalf("generator gave %d records, Generate %d", i, len(h.Records))
			}
			break
		}
		w := h.Records[i]
		if !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) || r.Offset != w.Offset || r.Checkpoint != w.Checkpoint {
			t.Fatalf("record %d differs", i)
		}
	}
}

func TestWideRowsAndTopicNames(t *testing.T) {
	o := Options{Seed: 9, Ops: 200, Users: 10, Domains: 10, UserPads: 40, DomainPads: 20, PadBytes: 100,
		ParentTopic: "pg.shop.customers", ChildTopic: "pg.shop.sites", Toast: 0.5}
	h, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	r := h.Records[len(h.Records)-1]
	if !bytes.Contains(h.Records[0].Value, []byte(`"name":"pg","ts_ms"`)) || !bytes.Contains(r.Value, []byte(`"schema":"shop","table":`)) {
		t.Fatalf("source block does not follow the topic: %s", r.Value)
	}
	if !bytes.Contains(h.Records[0].Value, []byte(`"pad_40"`)) && !bytes.Contains(h.Records[0].Value, []byte(`"pad_20"`)) {
		t.Fatal("pad columns missing")
	}
	if len(h.Records[0].Value) < 1500 {
		t.Fatalf("wide row only %d bytes", len(h.Records[0].Value))
	}
}

// TestAppendUpdate: MultiHistory.AppendUpdate appends one update record
// of the row on the partition of its earlier records, ending at a
// checkpoint, with the new value in its after image and in Final; it
// refuses a row that is not live and a value the row has.
func TestAppendUpdate(t *testing.T) {
	o := DefaultMultiOptions(5)
	o.Ops, o.Hot = 200, 0.3
	h, err := GenerateMulti(o)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	for k := range h.Final["users"] {
		id = k
		break
	}
	n := len(h.Records)
	v := MultiValue{Str: true, Text: "Touched"}
	if err := h.AppendUpdate("users", id, "firstname", v); err != nil {
		t.Fatal(err)
	}
	if len(h.Records) != n+1 || h.Stats.Records != n+1 || h.Checkpoints[len(h.Checkpoints)-1] != n+1 {
		t.Fatalf("records %d -> %d (stats %d), last checkpoint %d", n, len(h.Records), h.Stats.Records, h.Checkpoints[len(h.Checkpoints)-1])
	}
	r := h.Records[n]
	key := fmt.Sprintf(`{"id":%d}`, id)
	var part int32 = -1
	for _, e := range h.Records[:n] {
		if e.Topic == r.Topic && bytes.Contains(e.Key, []byte(key)) {
			part = e.Partition
		}
	}
	if r.Op != 'u' || r.Topic != "dbserver1.public.users" || !bytes.Contains(r.Key, []byte(key)) || r.Partition != part || !r.Checkpoint {
		t.Fatalf("appended %c %s/%d (the row's partition %d) key %s checkpoint %v", r.Op, r.Topic, r.Partition, part, r.Key, r.Checkpoint)
	}
	if !bytes.Contains(r.Value, []byte(`"after":{"id":`+fmt.Sprint(id)+`,"firstname":"Touched"`)) {
		t.Fatalf("after image without the new value: %s", r.Value)
	}
	if h.Final["users"][id][1] != v {
		t.Fatalf("Final users %d: %v", id, h.Final["users"][id])
	}
	if err := h.AppendUpdate("users", id, "firstname", v); err == nil {
		t.Fatal("an update to the value the row has was appended")
	}
	if err := h.AppendUpdate("users", 1e9, "firstname", MultiValue{Str: true, Text: "x"}); err == nil {
		t.Fatal("an update of a row that is not live was appended")
	}
}
