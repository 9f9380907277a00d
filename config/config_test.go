package config

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
)

const good = `name: user_domains
parent: {topic: dbserver1.public.users, key: id}
child:  {topic: dbserver1.public.domains, key: id, parent_key: user_id}
join: inner            # inner | left
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: ./state/user_domains}
`

func TestParseExample(t *testing.T) {
	c, err := Parse([]byte(good), "good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.OutputNames(), ","); got != "user_id,firstname,lastname,domain_id,domain_name" {
		t.Errorf("output names %s", got)
	}
	if c.Join != Inner || c.State.BatchEvents != 1000 || c.Errors.Policy != PolicyStop || c.State.Sync || c.State.Parallelism != runtime.NumCPU() {
		t.Errorf("defaults not applied: %+v", c)
	}
}

func TestSelectAsList(t *testing.T) {
	c, err := Parse([]byte(`name: x
parent: {topic: a, key: [id]}
child: {topic: b, key: id, parent_key: [user_id]}
join: left
select:
  - parent.id AS user_id
  - child.domain_name
state: {dir: /tmp/x}
`), "list.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Join != Left || len(c.Select) != 2 || c.Select[1].Side != row.Child || c.Select[1].Name != "domain_name" {
		t.Errorf("parsed %+v", c.Select)
	}
}

// Every problem is reported at once, each with its line.
func TestProblemsAllAtOnceWithLines(t *testing.T) {
	bad := `name: "bad name"
parent: {key: id}
child:  {topic: dbserver1.public.domains, key: id}
join: outer
select: parent.id AS user_id, users.firstname, child.id AS user_id
state: {batch_events: -5, parallelism: -1}
errors: {policy: dlq}
bogus: 1
`
	_, err := Parse([]byte(bad), "bad.yaml")
	var p *Problems
	if !errors.As(err, &p) {
		t.Fatalf("want *Problems, got %v", err)
	}
	want := []struct {
		line int
		frag string
	}{
		{1, "name"},
		{2, "parent.topic is required"},
		{3, "child.parent_key is required"},
		{4, `join "outer"`},
		{5, "users.firstname"},
		{6, "state.dir is required"},
		{6, "batch_events must be positive"},
		{6, "state.parallelism must be at least 1"},
		{7, "dlq needs errors.dlq_topic"},
		{8, "bogus"},
	}
	for _, w := range want {
		found := false
		for _, it := range p.Items {
			if it.Line == w.line && strings.Contains(it.Msg, w.frag) {
				found = true
			}
		}
		if !found {
			t.Errorf("missing problem at line %d containing %q; got:\n%v", w.line, w.frag, err)
		}
	}
	if !strings.HasPrefix(err.Error(), "cdcjoin: bad.yaml:") {
		t.Errorf("message should name the file: %v", err)
	}
}

func TestDuplicateOutputName(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(strings.Replace(good, "child.id AS domain_id", "child.id", 1), "parent.id AS user_id", "parent.id", 1)), "dup.yaml")
	if err == nil || !strings.Contains(err.Error(), `"id" appears twice`) {
		t.Fatalf("want duplicate-name problem, got %v", err)
	}
}

func TestNotYAML(t *testing.T) {
	_, err := Parse([]byte("name: [unclosed\n"), "broken.yaml")
	var p *Problems
	if !errors.As(err, &p) || len(p.Items) == 0 {
		t.Fatalf("want problems, got %v", err)
	}
}

func TestDeclaredTypes(t *testing.T) {
	c, err := Parse([]byte(`name: x
parent:
  topic: a
  key: id
  types: {id: bigint, balance: "numeric(12,2)", tags: "text[]"}
child:
  topic: b
  key: [region, no]
  parent_key: user_id
  types: {no: integer, user_id: "bigint not null", born: date}
select: parent.balance, parent.tags, child.born AS b, child.note
state: {dir: /tmp/x}
debezium:
  time.precision.mode: adaptive_time_microseconds
  unavailable.value.placeholder: "??"
`), "types.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pt := c.DeclaredTypes(row.Parent, []string{"id", "balance", "tags"})
	if c.KeyColumns(row.Parent, []string{"id", "balance", "tags"}) != 1 || len(pt) != 3 || pt[0].Kind != row.KindInt || pt[0].Optional ||
		pt[1].Kind != row.KindDecimal || pt[1].Scale != 2 || pt[2].Kind != row.KindArray || c.Debezium.UnavailableValuePlaceholder != "??" {
		t.Errorf("parent types %+v", pt)
	}
	// child projection: region, no, user_id, born, note
	ccols := []string{"region", "no", "user_id", "born", "note"}
	ct := c.DeclaredTypes(row.Child, ccols)
	if c.KeyColumns(row.Child, ccols) != 3 || len(ct) != 5 || ct[0].Known() || ct[1].Optional || ct[2].Optional ||
		ct[3].Kind != row.KindDate || ct[4].Known() {
		t.Errorf("child types %+v", ct)
	}
	out := c.DeclaredOutputTypes()
	if len(out) != 4 || out[0].Scale != 2 || out[1].Kind != row.KindArray || out[2].Kind != row.KindDate || out[3].Known() {
		t.Errorf("output types %+v", out)
	}
	if d := (&Config{}).DeclaredTypes(row.Parent, []string{"id"}); d != nil {
		t.Errorf("no declarations: %+v", d)
	}
	_, err = Parse([]byte(`name: x
parent:
  topic: a
  key: id
  types: {id: bigint, nme: text, balance: "numeric(2,3)"}
child: {topic: b, key: id, parent_key: user_id, types: {user_id: blob}}
select: parent.balance
state: {dir: /tmp/x}
debezium:
  decimal.handling.mode: exact
`), "bad.yaml")
	var p *Problems
	if !errors.As(err, &p) {
		t.Fatalf("err = %v", err)
	}
	want := []string{
		"line 5: parent.types.balance: type \"numeric(2,3)\"",
		"line 5: parent.types.nme: nme is not a key or selected column",
		"line 6: child.types.user_id: type \"blob\": unknown PostgreSQL type",
		"line 10: debezium.decimal.handling.mode \"exact\": use precise, string, double",
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in:\n%v", w, err)
		}
	}
	if len(p.Items) != len(want) {
		t.Errorf("%d problems, want %d:\n%v", len(p.Items), len(want), err)
	}
}
