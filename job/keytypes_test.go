package job

import (
	"testing"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
)

// TestKeyTypesSurviveARestart: a decoder restored from KeyTypes rejects a
// foreign key of another type than the one its predecessor saw first.
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
	if _, _, err := d.Decode("users", 0, 0, nil, []byte(`{"after":{"id":7},"op":"c"}`), &ev); err != nil {
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
	if _, _, err := restored.Decode("users", 0, 1, nil, []byte(`{"after":{"id":"7"},"op":"c"}`), &ev); err == nil {
		t.Error("a string parent key accepted after numeric ones")
	}
	if err := restored.RestoreKeyTypes([]byte{9, 1}); err == nil {
		t.Error("corrupt key types accepted")
	}
}
