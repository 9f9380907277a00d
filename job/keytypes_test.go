package job

import (
	"testing"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/row"
)

// TestKeyTypesSurviveARestart: a decoder restored from KeyTypes rejects a
// foreign key of another type than the one its predecessor saw first. The
// foreign key and the parent key are linked: a parent key of another type
// than the foreign keys seen (and the other way round) is a bad record too.
func TestKeyTypesSurviveARestart(t *testing.T) {
	cfg, err := config.Parse([]byte(`name: x
parent: {topic: users, key: id}
child: {topic: domains, key: id, parent_key: user_id}
select: parent.id, child.name
state: {dir: /tmp/unused}
`), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec := MustSpec(cfg)
	child := func(fk string) []byte {
		return []byte(`{"after":{"id":1,"user_id":` + fk + `,"name":"n"},"op":"c"}`)
	}
	var ev debezium.Event
	d := NewDecoder(cfg, spec, nil)
	if _, _, err := d.Decode("domains", 0, 0, nil, child(`"a"`), &ev); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Decode("users", 0, 0, nil, []byte(`{"after":{"id":7},"op":"c"}`), &ev); err == nil {
		t.Error("a numeric parent key accepted after string foreign keys")
	}
	if _, _, err := d.Decode("users", 0, 0, nil, []byte(`{"after":{"id":"p"},"op":"c"}`), &ev); err != nil {
		t.Fatal(err)
	}
	saved := d.KeyTypes()
	fresh := NewDecoder(cfg, spec, nil)
	if _, _, err := fresh.Decode("domains", 0, 1, nil, child(`5`), &ev); err != nil {
		t.Fatalf("a fresh decoder learns afresh: %v", err)
	}
	restored := NewDecoder(cfg, spec, nil)
	if err := restored.RestoreKeyTypes(saved); err != nil {
		t.Fatal(err)
	}
	if _, _, err := restored.Decode("domains", 0, 1, nil, child(`5`), &ev); err == nil {
		t.Error("a number foreign key accepted after string ones")
	}
	if _, _, err := restored.Decode("users", 0, 1, nil, []byte(`{"after":{"id":7},"op":"c"}`), &ev); err == nil {
		t.Error("a numeric parent key accepted after string ones")
	}
	// An integer parent key: a child's foreign key 71.5 can match no parent.
	ints := NewDecoder(cfg, spec, nil)
	if _, _, err := ints.Decode("users", 0, 2, nil, []byte(`{"after":{"id":71},"op":"c"}`), &ev); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ints.Decode("domains", 0, 2, nil, child(`71.5`), &ev); err == nil {
		t.Error("a foreign key 71.5 accepted for an integer parent key")
	}
	if _, _, err := ints.Decode("domains", 0, 3, nil, child(`7.1e1`), &ev); err != nil {
		t.Errorf("a foreign key 7.1e1 (71) for an integer parent key: %v", err)
	}
	if err := restored.RestoreKeyTypes([]byte{9, 1}); err == nil {
		t.Error("corrupt key types accepted")
	}
}

// TestLinkedDeclaredKeyTypes: a type declared for the parent's key also
// types the child's foreign key (and the other way round): with `id:
// bigint` declared on the parent only, a child whose user_id is 71.5 or
// "71" is a bad record (before: decoded as a decimal key and its row lost
// silently), 71.0 is 71.
func TestLinkedDeclaredKeyTypes(t *testing.T) {
	for _, yaml := range []string{
		"parent: {topic: users, key: id, types: {id: bigint not null}}\nchild: {topic: domains, key: id, parent_key: user_id}\n",
		"parent: {topic: users, key: id}\nchild: {topic: domains, key: id, parent_key: user_id, types: {user_id: bigint}}\n",
	} {
		cfg, err := config.Parse([]byte("name: x\n"+yaml+"select: parent.id, child.name\nstate: {dir: /tmp/unused}\n"), "x.yaml")
		if err != nil {
			t.Fatal(err)
		}
		d := NewDecoder(cfg, MustSpec(cfg), nil)
		var ev debezium.Event
		child := func(fk string) error {
			_, _, err := d.Decode("domains", 0, 0, nil, []byte(`{"after":{"id":1,"user_id":`+fk+`,"name":"n"},"op":"c"}`), &ev)
			return err
		}
		for _, bad := range []string{`71.5`, `"71"`, `1e30`} {
			if err := child(bad); err == nil {
				t.Errorf("%s: a foreign key %s accepted for a bigint parent key", yaml, bad)
			}
		}
		if err := child(`71.0`); err != nil || !ev.After.Values[1].Equal(row.Int(71)) {
			t.Errorf("%s: foreign key 71.0: %v %v", yaml, err, ev.After.Values)
		}
		if _, _, err := d.Decode("users", 0, 0, nil, []byte(`{"after":{"id":34.5},"op":"c"}`), &ev); err == nil {
			t.Errorf("%s: a parent key 34.5 accepted for a bigint key", yaml)
		}
	}
}

// TestTypesFromValues: the types of columns without a schema or declared
// type come from their non-NULL values, whatever the order: a NULL first
// does not make a column text (before: the first row of the first batch
// decided, and a date column was Nullable(String) in one run and
// Nullable(Int64) in the next); integers and decimals together are
// decimals, kinds that do not mix are text; a column with only NULLs stays
// unknown.
func TestTypesFromValues(t *testing.T) {
	cfg, err := config.Parse([]byte(`name: x
parent: {topic: users, key: id}
child: {topic: domains, key: id, parent_key: user_id}
select: parent.id, child.day, child.amount, child.mixed, child.never
state: {dir: /tmp/unused}
`), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec := MustSpec(cfg)
	recs := []string{
		`{"after":{"id":1,"user_id":1,"day":null,"amount":5,"mixed":1,"never":null},"op":"c"}`,
		`{"after":{"id":2,"user_id":1,"day":19000,"amount":2.5,"mixed":"a","never":null},"op":"c"}`,
		`{"after":{"id":3,"user_id":1,"day":null,"amount":null,"mixed":null,"never":null},"op":"c"}`,
	}
	typesOf := func(order []int) []row.ColumnType {
		d := NewDecoder(cfg, spec, nil)
		var ty Types
		var ev debezium.Event
		if _, _, err := d.Decode("users", 0, 0, nil, []byte(`{"after":{"id":1},"op":"c"}`), &ev); err != nil {
			t.Fatal(err)
		}
		ty.Observe(row.Parent, &ev)
		for _, i := range order {
			side, _, err := d.Decode("domains", 0, int64(i), nil, []byte(recs[i]), &ev)
			if err != nil {
				t.Fatal(err)
			}
			ty.Observe(side, &ev)
		}
		return ty.Output(spec)
	}
	want := []row.Kind{row.KindInt, row.KindInt, row.KindDecimal, row.KindString}
	for _, order := range [][]int{{0, 1, 2}, {1, 0, 2}, {2, 1, 0}, {2, 0, 1}} {
		got := typesOf(order)
		for i, k := range want {
			if got[i].Kind != k {
				t.Errorf("order %v: column %d typed %v, want %v", order, i, got[i].Kind, k)
			}
		}
		if got[4].Known() {
			t.Errorf("order %v: a column with only NULLs typed %v", order, got[4])
		}
	}
}
