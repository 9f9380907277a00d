package query

import (
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
)

func testTables() map[string]*Table {
	return map[string]*Table{
		"users":       {Key: []string{"id"}},
		"domains":     {Key: []string{"id"}},
		"dns_records": {Key: []string{"id"}, Kinds: map[string]row.Kind{"ttl": row.KindInt}},
	}
}

const example = `SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name,
       r.id AS record_id, r.rtype, r.ttl
FROM users u
JOIN domains d ON d.user_id = u.id
LEFT JOIN dns_records r ON r.domain_id = d.id AND r.rtype <> 'TXT'
WHERE d.domain_name LIKE '%.com' AND u.lastname IS NOT NULL`

func TestParseExample(t *testing.T) {
	q, errs := Parse(example, testTables())
	if errs != nil {
		t.Fatalf("errors: %v", errs)
	}
	if len(q.From) != 3 || q.From[2].Alias != "r" || q.From[2].Table != "dns_records" {
		t.Fatalf("from: %+v", q.From)
	}
	if len(q.Joins) != 2 || q.Joins[0].Kind != Inner || q.Joins[1].Kind != Left {
		t.Fatalf("joins: %+v", q.Joins)
	}
	if len(q.Joins[1].On) != 2 || len(q.Where) != 2 {
		t.Fatalf("on %d where %d", len(q.Joins[1].On), len(q.Where))
	}
	var names []string
	for _, s := range q.Select {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "user_id,firstname,lastname,domain_id,domain_name,record_id,rtype,ttl" {
		t.Fatalf("names %s", got)
	}
	if got := q.Joins[1].On[1].Expr.String(); got != "r.rtype <> 'TXT'" {
		t.Errorf("cond %s", got)
	}
	if p := q.Where[0].Pos; p.Line != 6 || p.Column != 21 {
		t.Errorf("where pos %+v", p)
	}
}

func TestRefusals(t *testing.T) {
	for _, c := range []struct{ sql, want string }{
		{"SELECT u.id FROM users u JOIN domains d ON d.user_id = u.id ORDER BY u.id", "line 1, column 70: ORDER BY is not supported"},
		{"SELECT u.id FROM users u,\n domains d", "line 2, column 2: a comma in FROM"},
		{"SELECT *\nFROM users u JOIN domains d ON d.user_id = u.id", "line 1, column 8: * is not supported"},
		{"SELECT u.id FROM users u JOIN nope n ON n.x = u.id", "column 31: table \"nope\" is not in tables"},
		{"SELECT u.id FROM users u JOIN domains d USING (id)", "JOIN … USING is not supported"},
		{"SELECT u.id FROM users u NATURAL JOIN domains d", "NATURAL JOIN is not supported"},
		{"SELECT u.id FROM users u CROSS JOIN domains d", "CROSS JOIN"},
		{"SELECT u.id FROM users u JOIN (domains d JOIN dns_records r ON r.domain_id = d.id) ON d.user_id = u.id", "right side of a JOIN must be a table"},
		{"SELECT count(*) FROM users u JOIN domains d ON d.user_id = u.id", "aggregates are not supported"},
		{"SELECT u.id, d.id FROM users u JOIN domains d ON d.user_id = u.id", "output name \"id\" appears twice"},
		{"SELECT u.id FROM users u JOIN domains d ON d.user_id = u.id WHERE r.ttl > 1", "missing FROM-clause entry for table \"r\""},
		{"SELECT u.id FROM users u JOIN domains d ON d.user_id = u.id WHERE users.id = 1", "use its alias \"u\""},
		{"SELECT firstname FROM users u JOIN domains d ON d.user_id = u.id", "qualify it with its table's alias"},
		{"SELECT u.id FROM users u JOIN dns_records r ON r.domain_id = u.id WHERE r.ttl > 'abc'", "invalid input syntax for type bigint"},
		{"SELECT u.id FROM users u JOIN dns_records r ON r.domain_id = u.id WHERE r.ttl LIKE 'a%'", "LIKE needs text"},
		{"SELECT u.id FROM users u JOIN domains d ON d.user_id = u.id WHERE d.x IN (SELECT 1)", "subqueries are not supported"},
		{"SELECT u.id + 1 FROM users u JOIN domains d ON d.user_id = u.id", "give the expression"},
		{"SELECT u.id FROM users u JOIN domains d ON d.user_id = u.id WHERE\n  u.id = = 1", "line 2, column 10: syntax error at or near \"=\""},
		{"SELECT u.id FROM users u JOIN domains d ON d.user_id = u.id UNION SELECT 1", "UNION"},
		{"SELECT u.id FROM users u", "at least two tables"},
		{"SELECT u.id AS _x FROM users u JOIN domains d ON d.user_id = u.id", "reserved"},
		{"SELECT u.id FROM users u JOIN users u ON u.id = u.id", "specified more than once"},
		{"SELECT u.id FROM users u JOIN domains d ON d.user_id = u.id WHERE d.n LIKE 'a' ESCAPE '!'", "ESCAPE is not supported"},
	} {
		_, errs := Parse(c.sql, testTables())
		var msgs []string
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		all := strings.Join(msgs, "\n")
		if !strings.Contains(all, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.sql, all, c.want)
		}
	}
}

func TestLiterals(t *testing.T) {
	q, errs := Parse(`SELECT u.id FROM users u JOIN dns_records r ON r.domain_id = u.id
WHERE r.ttl > '300' AND r.x = 1.5e3 AND r.y = 12345678901 AND r.z = -0.05 AND r.w = '2024-01-01'::date`, testTables())
	if errs != nil {
		t.Fatal(errs)
	}
	var got []string
	for _, c := range q.Where {
		got = append(got, c.Expr.String())
	}
	want := "r.ttl > 300|r.x = 1500|r.y = 12345678901|r.z = -0.05|r.w = '2024-01-01'"
	if strings.Join(got, "|") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, "|"), want)
	}
}
