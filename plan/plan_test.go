package plan

import (
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/query"
	"github.com/cdcjoin/cdcjoin/row"
)

func tables() map[string]*query.Table {
	return map[string]*query.Table{
		"users":       {Key: []string{"id"}},
		"domains":     {Key: []string{"id"}},
		"dns_records": {Key: []string{"id"}, Kinds: map[string]row.Kind{"ttl": row.KindInt}},
		"registrars":  {Key: []string{"id"}},
		"emails":      {Key: []string{"id"}},
	}
}

func compile(t *testing.T, sql string) *Plan {
	t.Helper()
	q, errs := query.Parse(sql, tables())
	if errs != nil {
		t.Fatalf("parse: %v", errs)
	}
	p, errs := Compile(q)
	if errs != nil {
		t.Fatalf("compile: %v", errs)
	}
	return p
}

const example = `SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name,
       r.id AS record_id, r.rtype, r.ttl
FROM users u
JOIN domains d ON d.user_id = u.id
LEFT JOIN dns_records r ON r.domain_id = d.id AND r.rtype <> 'TXT'
WHERE d.domain_name LIKE '%.com' AND u.lastname IS NOT NULL`

func TestCompileExample(t *testing.T) {
	p := compile(t, example)
	if len(p.Stages) != 2 || p.Materialize {
		t.Fatalf("stages %d materialize %v", len(p.Stages), p.Materialize)
	}
	s1, s2 := &p.Stages[0], &p.Stages[1]
	if s1.Kind != Inner || s2.Kind != Left {
		t.Fatalf("kinds %v %v", s1.Kind, s2.Kind)
	}
	if got := s1.L.Filter.String(); got != "u.lastname IS NOT NULL" {
		t.Errorf("u filter %s", got)
	}
	if got := s1.R.Filter.String(); got != "d.domain_name LIKE '%.com'" {
		t.Errorf("d filter %s", got)
	}
	if s2.R.Filter == nil || s2.R.Filter.String() != "r.rtype <> 'TXT'" || s2.R.Match != nil {
		t.Errorf("r: filter %v match %v", s2.R.Filter, s2.R.Match)
	}
	if !s1.L.Single || s1.R.Single || !s2.L.Single || s2.R.Single {
		t.Errorf("single: %v %v %v %v", s1.L.Single, s1.R.Single, s2.L.Single, s2.R.Single)
	}
	// Stage 1 emits what stage 2 and the select list need: d.user_id is not.
	if got := names(p, s1.Out, seq(len(s1.Out))); got != "u.id, u.firstname, u.lastname, d.id, d.domain_name" {
		t.Errorf("stage 1 out: %s", got)
	}
	if got := names(p, s2.Out, p.RowKey); got != "u.id, d.id, r.id" {
		t.Errorf("row key %s", got)
	}
	ex := Explain(p, map[string]TableInfo{"users": {Topic: "dbserver1.public.users"}})
	for _, want := range []string{"stage 2: LEFT JOIN on d.id = r.domain_id", "u = users (dbserver1.public.users)", "filter: r.rtype <> 'TXT'"} {
		if !strings.Contains(ex, want) {
			t.Errorf("explain lacks %q:\n%s", want, ex)
		}
	}
	if _, ok := p.Legacy(); ok {
		t.Error("a three-table plan is not legacy")
	}
}

func TestReduce(t *testing.T) {
	for _, c := range []struct {
		sql   string
		kinds string
	}{
		{"SELECT u.id FROM users u LEFT JOIN domains d ON d.user_id = u.id WHERE d.name = 'x'", "INNER"},
		{"SELECT u.id FROM users u LEFT JOIN domains d ON d.user_id = u.id WHERE d.name IS NULL", "LEFT"},
		{"SELECT u.id FROM users u LEFT JOIN domains d ON d.user_id = u.id WHERE coalesce(d.name, 'x') = 'x'", "LEFT"},
		{"SELECT u.id FROM users u RIGHT JOIN domains d ON d.user_id = u.id WHERE u.name > 'a'", "INNER"},
		{"SELECT u.id FROM users u FULL JOIN domains d ON d.user_id = u.id WHERE u.name > 'a'", "LEFT"},
		{"SELECT u.id FROM users u FULL JOIN domains d ON d.user_id = u.id WHERE d.name > 'a'", "RIGHT"},
		{"SELECT u.id FROM users u FULL JOIN domains d ON d.user_id = u.id WHERE d.name > 'a' OR u.name > 'b'", "FULL"},
		{"SELECT u.id FROM users u LEFT JOIN domains d ON d.user_id = u.id JOIN dns_records r ON r.domain_id = d.id", "INNER,INNER"},
		{"SELECT u.id FROM users u LEFT JOIN domains d ON d.user_id = u.id LEFT JOIN dns_records r ON r.domain_id = d.id", "LEFT,LEFT"},
		{"SELECT u.id FROM users u LEFT JOIN domains d ON d.user_id = u.id RIGHT JOIN dns_records r ON r.domain_id = d.id", "INNER,RIGHT"},
		{"SELECT u.id FROM users u LEFT JOIN domains d ON d.user_id = u.id FULL JOIN dns_records r ON r.domain_id = d.id WHERE u.x = 1", "LEFT,LEFT"},
	} {
		p := compile(t, c.sql)
		var ks []string
		for _, s := range p.Stages {
			ks = append(ks, s.Kind.String())
		}
		if got := strings.Join(ks, ","); got != c.kinds {
			t.Errorf("%s: kinds %s, want %s", c.sql, got, c.kinds)
		}
	}
}

func TestPlacement(t *testing.T) {
	p := compile(t, `SELECT u.id FROM users u LEFT JOIN domains d ON d.user_id = u.id AND d.x > 1 AND u.y = 2
		FULL JOIN dns_records r ON r.domain_id = d.id AND r.t = 'A' WHERE u.z = 3 OR d.w = 4`)
	s1, s2 := &p.Stages[0], &p.Stages[1]
	if s1.Kind != Left || s2.Kind != Full {
		t.Fatalf("kinds %v %v", s1.Kind, s2.Kind)
	}
	if s1.R.Filter == nil || s1.R.Filter.String() != "d.x > 1" || s1.L.Match == nil || s1.L.Match.String() != "u.y = 2" {
		t.Errorf("stage 1: R filter %v, L match %v", s1.R.Filter, s1.L.Match)
	}
	if s2.R.Match == nil || s2.R.Match.String() != "r.t = 'A'" || s2.R.Filter != nil {
		t.Errorf("stage 2: R match %v filter %v", s2.R.Match, s2.R.Filter)
	}
	if s2.Residual == nil || s1.Residual != nil {
		t.Errorf("the WHERE goes after the FULL join: %v %v", s1.Residual, s2.Residual)
	}
	if !s2.TagPadR || !p.Materialize {
		t.Errorf("padded dns_records rows move between keys (r.domain_id is no key): tag %v", s2.TagPadR)
	}
}

func TestManyToMany(t *testing.T) {
	p := compile(t, "SELECT d.id AS d_id, e.id AS e_id FROM domains d JOIN emails e ON e.user_id = d.user_id")
	if s := &p.Stages[0]; !s.TagJoined || !p.Materialize {
		t.Errorf("joined rows of a many-to-many join on non-key columns move between keys: %v", s.TagJoined)
	}
	p = compile(t, "SELECT d.id AS d_id, e.id AS e_id FROM users u JOIN domains d ON d.user_id = u.id JOIN emails e ON e.user_id = u.id")
	if p.Materialize {
		t.Error("joined on u.id, a key of the left side: no materializer")
	}
}

func TestCompileErrors(t *testing.T) {
	for _, c := range []struct{ sql, want string }{
		{"SELECT u.id FROM users u JOIN domains d ON d.x > u.id", "must equate a column of d with a column of a table before it"},
		{"SELECT u.id FROM users u LEFT JOIN domains d ON d.user_id = u.id AND d.x > u.y", "LEFT JOIN d: a condition in ON that involves both sides"},
	} {
		q, errs := query.Parse(c.sql, tables())
		if errs != nil {
			t.Fatal(errs)
		}
		_, errs = Compile(q)
		if len(errs) == 0 || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.sql, errs, c.want)
		}
	}
	// Reduced to INNER, the residual is a filter.
	compile(t, "SELECT u.id FROM users u LEFT JOIN domains d ON d.user_id = u.id AND d.x > u.y WHERE d.z = 1")
}

func TestLegacy(t *testing.T) {
	p := compile(t, "SELECT u.id AS user_id, u.firstname, d.id AS domain_id, d.domain_name FROM users u LEFT JOIN domains d ON u.id = d.user_id")
	sh, ok := p.Legacy()
	if !ok || !sh.Left || sh.ChildFK[0] != "user_id" || len(sh.Select) != 4 || !sh.Select[3].Child || sh.Select[0].Name != "user_id" {
		t.Fatalf("legacy %v %+v", ok, sh)
	}
	for _, sql := range []string{
		"SELECT u.id FROM users u LEFT JOIN domains d ON u.id = d.user_id WHERE u.x = 1",
		"SELECT u.id FROM users u RIGHT JOIN domains d ON u.id = d.user_id",
		"SELECT u.id FROM users u JOIN domains d ON u.x = d.user_id",
		"SELECT lower(u.id) AS x FROM users u JOIN domains d ON u.id = d.user_id",
		"SELECT u.id FROM users u JOIN domains d ON u.id = d.user_id AND d.x = 1",
	} {
		if _, ok := compile(t, sql).Legacy(); ok {
			t.Errorf("%s: not legacy", sql)
		}
	}
}
