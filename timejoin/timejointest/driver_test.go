package timejointest

import (
	"strings"
	"testing"
	"time"
)

func TestConfigProblems(t *testing.T) {
	_, err := New(Config{Kind: "sliding", Join: "outer", Select: []string{"parent.id", "window.middle"}})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`kind "sliding"`, `join "outer"`, "left input needs", "right input needs", `select "parent.id"`, "a window has start and end"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: missing %q", err, want)
		}
	}
}

func TestRestartKeepsState(t *testing.T) {
	d, err := New(Config{Kind: "interval", Join: "left", Upper: time.Minute,
		Left:   Input{Name: "a", Key: []string{"k"}, Time: "t"},
		Right:  Input{Name: "b", Key: []string{"k"}, Time: "t"},
		Select: []string{"left.id", "right.id AS rid"}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	mustPipe(t, d, "a", map[string]any{"id": 1, "k": "x", "t": t0})
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	mustPipe(t, d, "b", map[string]any{"id": 2, "k": "x", "t": t0.Add(time.Minute)})
	mustPipe(t, d, "a", map[string]any{"id": 3, "k": "y", "t": t0.Add(2 * time.Minute)})
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	mustPipe(t, d, "b", map[string]any{"id": 4, "k": "z", "t": t0.Add(3 * time.Minute)})
	if err := d.EndOfInput(); err != nil {
		t.Fatal(err)
	}
	got := d.ReadRows()
	if len(got) != 2 || got[0].String() != "{id: 1, rid: 2}" || got[1].String() != "{id: 3, rid: NULL}" {
		t.Fatalf("rows %v", got)
	}
	if n := d.StateEntries(); n > 3 {
		t.Errorf("%d state entries after the end of input", n)
	}
	if _, err := d.Pipe("a", 0, map[string]any{"id": 5, "k": "x", "t": "noon"}); err == nil {
		t.Error("a string time was accepted")
	}
	if _, err := d.Pipe("c", 0, nil); err == nil {
		t.Error("an unknown input was accepted")
	}
}

func mustPipe(t *testing.T, d *Driver, in string, v map[string]any) {
	t.Helper()
	if _, err := d.Pipe(in, 0, v); err != nil {
		t.Fatal(err)
	}
}
