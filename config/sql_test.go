package config

import (
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
)

const issueExample = `name: user_records
tables:                                   # every table the query names: its Debezium topic and primary key
  users:       {topic: dbserver1.public.users, key: id}
  domains:     {topic: dbserver1.public.domains, key: id}
  dns_records: {topic: dbserver1.public.dns_records, key: id, types: {ttl: integer}}
query: |
  SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name,
         r.id AS record_id, r.rtype, r.ttl
  FROM users u
  JOIN domains d ON d.user_id = u.id
  LEFT JOIN dns_records r ON r.domain_id = d.id AND r.rtype <> 'TXT'
  WHERE d.domain_name LIKE '%.com' AND u.lastname IS NOT NULL
state: {dir: ./state/user_records}
`

func TestSQLJob(t *testing.T) {
	c, err := Parse([]byte(issueExample), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.SQL() || c.Plan() == nil || len(c.Plan().Stages) != 2 {
		t.Fatalf("sql %v plan %v", c.SQL(), c.Plan())
	}
	if got := strings.Join(c.OutputNames(), ","); got != "user_id,firstname,lastname,domain_id,domain_name,record_id,rtype,ttl" {
		t.Errorf("names %s", got)
	}
	types := c.DeclaredOutputTypes()
	if types[7].Kind != row.KindInt || !types[7].Optional {
		t.Errorf("ttl type %+v (integer, nullable: a LEFT join pads it)", types[7])
	}
	padded := c.OutputPadded()
	if padded[0] || !padded[5] {
		t.Errorf("padded %v", padded)
	}
}

func TestSQLParentChildShape(t *testing.T) {
	c, err := Parse([]byte(`name: user_domains
tables:
  users: {topic: dbserver1.public.users, key: id}
  domains: {topic: dbserver1.public.domains, key: id, types: {user_id: bigint}}
query: SELECT u.id AS user_id, u.firstname, d.id AS domain_id FROM users u LEFT JOIN domains d ON d.user_id = u.id
state: {dir: /tmp/x}
`), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Plan() != nil || c.Compiled() == nil {
		t.Fatal("a parent/child shaped query runs as parent/child")
	}
	if c.Parent.Topic != "dbserver1.public.users" || c.Child.ParentKey[0] != "user_id" || c.Join != Left || len(c.Select) != 3 || c.Select[2].Side != row.Child {
		t.Errorf("parent %+v child %+v join %v select %+v", c.Parent, c.Child, c.Join, c.Select)
	}
}

func TestSQLProblems(t *testing.T) {
	_, err := Parse([]byte(`name: x
tables:
  users: {topic: t.users, key: id, types: {zip: text}}
  domains: {topic: t.domains}
  unused: {topic: t.unused, key: id}
query: |
  SELECT u.id
  FROM users u JOIN domains d ON d.user_id > u.id
state: {dir: /tmp/x}
`), "x.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{"line 4: tables.domains.key is required"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s\nlacks %q", msg, want)
		}
	}
	_, err = Parse([]byte(`name: x
tables:
  users: {topic: t.users, key: id, types: {zip: text}}
  domains: {topic: t.domains, key: id}
  unused: {topic: t.unused, key: id}
query: |
  SELECT u.id
  FROM users u JOIN domains d ON d.user_id > u.id
state: {dir: /tmp/x}
`), "x.yaml")
	if err == nil || !strings.Contains(err.Error(), "line 8: query: query line 2, column 19: JOIN d: the ON condition must equate") {
		t.Errorf("%v", err)
	}
	_, err = Parse([]byte(`name: x
tables:
  users: {topic: t.users, key: id, types: {zip: text}}
  domains: {topic: t.domains, key: id}
  unused: {topic: t.unused, key: id}
query: SELECT u.id FROM users u JOIN domains d ON d.user_id = u.id
parent: {topic: a, key: id}
state: {dir: /tmp/x}
`), "x.yaml")
	for _, want := range []string{"two forms of a job", "tables.unused is not used", "tables.users.types.zip: the query does not use zip"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}
}
