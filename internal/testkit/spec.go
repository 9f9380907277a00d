// Package testkit holds helpers the tests of several packages share: the
// join spec they build their inputs for.
package testkit

import (
	"testing"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/row"
)

// Spec compiles the users ⋈ domains join the unit tests use: parent key
// id, child key id, foreign key user_id, and the select list parent.id AS
// user_id, then parent.<col> for each of parentCols, child.id AS
// domain_id, then child.<col> for each of childCols (each named as its
// column).
func Spec(t testing.TB, left bool, parentCols, childCols []string) *keyed.Spec {
	t.Helper()
	sel := []keyed.Column{{Side: row.Parent, Source: "id", Name: "user_id"}}
	for _, c := range parentCols {
		sel = append(sel, keyed.Column{Side: row.Parent, Source: c, Name: c})
	}
	sel = append(sel, keyed.Column{Side: row.Child, Source: "id", Name: "domain_id"})
	for _, c := range childCols {
		sel = append(sel, keyed.Column{Side: row.Child, Source: c, Name: c})
	}
	s, err := keyed.NewSpec(keyed.Shape{
		Left: left, ParentKey: []string{"id"}, ChildKey: []string{"id"}, ChildParentKey: []string{"user_id"},
		Select: sel,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
