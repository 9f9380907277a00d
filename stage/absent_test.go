package stage

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
)

// TestAbsentHintNegativeControl: an upsert wrongly marked Input.Absent
// (its row exists at its key) is caught by the check every exhaustive test
// runs with (verifyAbsent), and without the check it changes what the Join
// emits (the read it skips matters): so the exhaustive tests' pass shows
// the Feeders' hints are right, not merely harmless.
func TestAbsentHintNegativeControl(t *testing.T) {
	_, p := compileQuery(t, "SELECT u.id AS uid, u.name AS uname, d.id AS did FROM users u JOIN domains d ON d.user_id = u.id")
	st := &p.Stages[0]
	userRow := func(name string) []row.Value {
		vals := make([]row.Value, len(p.Tables[0].Columns))
		for i, c := range p.Tables[0].Columns {
			switch c {
			case "id":
				vals[i] = i64(1)
			case "name":
				vals[i] = str(name)
			}
		}
		return vals
	}
	domainRow := make([]row.Value, len(p.Tables[1].Columns))
	for i, c := range p.Tables[1].Columns {
		switch c {
		case "id":
			domainRow[i] = i64(10)
		case "user_id":
			domainRow[i] = i64(1)
		}
	}
	key := row.AppendKey(nil, []row.Value{i64(1)})
	did := row.AppendKey(nil, []row.Value{i64(10)})
	// run applies user 1, its domain, then a rename of user 1 (the last
	// input marked absent: wrong), and returns the emitted changes.
	run := func(verify, wrongHint bool) ([]string, error) {
		j := NewJoin(st)
		j.verifyAbsent = verify
		kv := NewMemState()
		var out []string
		emit := func(d *Delta) error {
			out = append(out, fmt.Sprintf("%v id=%x row=%v prev=%v v=%d pv=%d", d.Op, d.ID, d.Row, d.Prev, d.Version, d.PrevVersion))
			return nil
		}
		ins := []struct {
			s  Side
			in Input
		}{
			{L, Input{Key: key, ID: key, Row: userRow("a"), Matchable: true, Absent: true}},
			{R, Input{Key: key, ID: did, Row: domainRow, Matchable: true, Absent: true}},
			{L, Input{Key: key, ID: key, Row: userRow("b"), Matchable: true, Absent: wrongHint}},
		}
		for i, x := range ins {
			if err := j.Apply(kv, x.s, &x.in, uint64(i+1), emit); err != nil {
				return out, err
			}
		}
		return out, nil
	}
	want, err := run(true, false)
	if err != nil {
		t.Fatalf("right hints: %v", err)
	}
	if len(want) != 2 {
		t.Fatalf("right hints: want the joined row's upsert and its update, got %q", want)
	}
	if _, err := run(true, true); err == nil || !strings.Contains(err.Error(), "marked absent") {
		t.Fatalf("a wrong hint with the check on: want the check's error, got %v", err)
	}
	got, err := run(false, true)
	if err != nil {
		t.Fatalf("a wrong hint with the check off: %v", err)
	}
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		t.Fatalf("a wrong hint with the check off emitted the same changes (the skipped read did not matter):\n%s", strings.Join(got, "\n"))
	}
	t.Logf("right hints:\n%s\nwrong hint, check off:\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
}
