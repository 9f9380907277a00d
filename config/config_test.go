package config

import (
	"errors"
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
	if c.Join != Inner || c.State.BatchEvents != 1000 || c.Errors.Policy != PolicyStop || c.State.Sync {
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
state: {batch_events: -5}
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
