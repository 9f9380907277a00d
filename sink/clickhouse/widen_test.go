package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/row"
)

func widenChange(pk, ck int64, domain row.Value, amount string, ver uint64) row.Change {
	a := row.Null()
	if amount != "" {
		a = row.Decimal(amount)
	}
	return row.Change{Op: row.Upsert, Version: ver, ParentKey: []row.Value{row.Int(pk)}, ChildKey: []row.Value{row.Int(ck)},
		Values: []row.Value{row.Int(pk), row.String("u"), row.Int(ck), domain, a, row.Timestamp(0)}}
}

// TestWidening: a widened source column (int → bigint, numeric(10,2) →
// numeric(15,3), a NOT NULL dropped) sends values the table's columns,
// created from the old types, cannot hold. The sink that meets one widens
// the column (ALTER TABLE … MODIFY COLUMN) and goes on; a second sink of the
// table, with a batch made for the old types, moves it to the new ones at
// its INSERT. Without create_table the sink stops naming the column, its
// type, the value and the statement to run.
func TestWidening(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := testConfig(t, addr, "upsert", "inner", "")
	open := func() *Sink {
		s, err := Open(ctx, cfg, Options{Types: testTypes(), Driven: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	// b's batch is made (and filled) for the old types.
	if err := b.Write(ctx, []row.Change{widenChange(2, 20, row.String("b"), "1.50", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := a.Write(ctx, []row.Change{widenChange(1, 3_000_000_000, row.String("a"), "123456789012.345", 2)}); err != nil {
		t.Fatalf("widening write: %v", err)
	}
	if err := a.Write(ctx, []row.Change{widenChange(3, 30, row.Null(), "", 3)}); err != nil {
		t.Fatalf("NULL write: %v", err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Write(ctx, []row.Change{widenChange(4, 40, row.String("d"), "2.25", 4)}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatalf("the other sink's batch of the old types: %v", err)
	}
	conn := rawConn(t, addr)
	c := cfg.ClickHouse
	types := map[string]string{}
	rows, err := conn.Query(ctx, "SELECT name, type FROM system.columns WHERE database = ? AND table = ?", c.Database, c.Table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n, ty string
		if err := rows.Scan(&n, &ty); err != nil {
			t.Fatal(err)
		}
		types[n] = ty
	}
	rows.Close()
	for col, want := range map[string]string{"domain_id": "Int64", "amount": "Nullable(Decimal(15, 3))", "domain": "Nullable(String)"} {
		if types[col] != want {
			t.Errorf("column %s is %s, want %s", col, types[col], want)
		}
	}
	got := queryRows(t, conn, fmt.Sprintf("SELECT toString(user_id), toString(domain_id), ifNull(domain, 'NULL'), ifNull(toString(amount), 'NULL'), '', '' FROM %s.%s", c.Database, ViewName(c)))
	want := []string{"1|3000000000|a|123456789012.345||", "2|20|b|1.500||", "3|30|NULL|NULL||", "4|40|d|2.250||"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if a.st.widened.Load() != 3 {
		t.Errorf("%d columns widened, want 3", a.st.widened.Load())
	}

	// Without create_table: a clear stop.
	off := testConfig(t, addr, "upsert", "inner", "  create_table: false\n")
	off.ClickHouse.Table = c.Table + "_off"
	on := *off
	chOn := *off.ClickHouse
	tr := true
	chOn.CreateTable = &tr
	on.ClickHouse = &chOn
	mk, err := Open(ctx, &on, Options{Types: testTypes()})
	if err != nil {
		t.Fatal(err)
	}
	mk.Close()
	s, err := Open(ctx, off, Options{Types: testTypes(), Driven: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Write(ctx, []row.Change{widenChange(1, 5_000_000_000, row.String("x"), "1", 1)})
	if err == nil || !strings.Contains(err.Error(), "MODIFY COLUMN `domain_id` Int64") || !strings.Contains(err.Error(), "is Int32") {
		t.Fatalf("without create_table: %v", err)
	}
}
