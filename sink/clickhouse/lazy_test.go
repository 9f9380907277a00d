package clickhouse

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/internal/testkit"
	"github.com/cdcjoin/cdcjoin/row"
)

// TestLazyInsertTypes: a LazyInsert creates its table typed by what types
// knows (right.name, as a sample of the topics found it), the declared
// types (left.t) and, for the rest (left.id), the first Write's values;
// its types func gets the Write's context. Negative case: the first
// rows are all padded (name NULL) and types knows nothing of name: the
// Write fails with an *UntypedError naming name, and no table is made.
func TestLazyInsertTypes(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	ctx := context.WithValue(context.Background(), lazyTestKey{}, "w")
	newConfig := func() *config.Config { return insertConfigTypes(t, addr, "", "") }
	padded := []row.Change{{Op: row.Insert, Version: 1, Values: []row.Value{row.Int(1), row.Timestamp(1000), row.Null()}}}
	conn := rawConn(t, addr)
	columns := func(cfg *config.Config) []string {
		t.Helper()
		rows, err := conn.Query(ctx, "SELECT name || ' ' || type FROM system.columns WHERE database = ? AND table = ?", testDB, cfg.ClickHouse.Table)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		return testkit.Strings(t, rows)
	}

	cfg := newConfig()
	var got any
	l := NewLazyInsert(cfg, func(ctx context.Context) []row.ColumnType {
		got = ctx.Value(lazyTestKey{})
		return []row.ColumnType{{}, {}, {Kind: row.KindString, Connect: "string", Optional: true}}
	}, func() string { return "s" })
	defer l.Close()
	if err := l.Write(ctx, padded); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got != "w" {
		t.Fatalf("types got the context value %v, not the Write's", got)
	}
	cols := columns(cfg)
	for _, want := range []string{"id Nullable(Int64)", "name Nullable(String)"} {
		if !slices.Contains(cols, want) {
			t.Fatalf("columns %q, want %s among them", cols, want)
		}
	}
	// t is the declared timestamp (DateTime64, or Int64 µs on servers
	// without it), not a guess.
	if i := slices.IndexFunc(cols, func(c string) bool { return strings.HasPrefix(c, "t ") }); i < 0 || strings.Contains(cols[i], "String") {
		t.Fatalf("columns %q: t is not the declared timestamp", cols)
	}

	cfg = newConfig()
	n := NewLazyInsert(cfg, func(context.Context) []row.ColumnType { return nil }, func() string { return "s" })
	defer n.Close()
	err := n.Write(ctx, padded)
	var ue *UntypedError
	if !errors.As(err, &ue) || !slices.Equal(ue.Columns, []string{"name"}) {
		t.Fatalf("Write of padded rows with nothing known of name: %v, want an UntypedError naming name", err)
	}
	if cols := columns(cfg); len(cols) != 0 {
		t.Fatalf("a table was made: %s", strings.Join(cols, ", "))
	}
}

type lazyTestKey struct{}
