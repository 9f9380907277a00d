package e2e

import (
	"context"
	"testing"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// TestClickHouseReadAndTamper checks the ClickHouse side of the comparison
// on a real server, without cdcjoin: a table in the sink's upsert layout
// (hidden _pk, _ck, _version, _deleted; ReplacingMergeTree; a FINAL view)
// reads back equal to what was written, NULLs and all, and Tamper makes
// the comparison fail with exactly one corrupted and one dropped row.
func TestClickHouseReadAndTamper(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	ctx := context.Background()
	c, err := OpenClickHouse(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const table = "e2e_tamper_test"
	if err := c.DropTable(ctx, "default", table); err != nil {
		t.Fatal(err)
	}
	defer c.DropTable(ctx, "default", table)
	for _, q := range []string{
		`CREATE TABLE default.e2e_tamper_test (user_id Int64, firstname Nullable(String), lastname Nullable(String),
			domain_id Nullable(Int64), domain_name Nullable(String), _pk String, _ck String, _version UInt64, _deleted UInt8)
			ENGINE = ReplacingMergeTree(_version) ORDER BY (_pk, _ck)`,
		`CREATE VIEW default.e2e_tamper_test_current AS SELECT user_id, firstname, lastname, domain_id, domain_name
			FROM default.e2e_tamper_test FINAL WHERE _deleted = 0`,
	} {
		if err := c.conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	str := func(s string) *string { return &s }
	i64 := func(v int64) *int64 { return &v }
	b, err := c.conn.PrepareBatch(ctx, "INSERT INTO default.e2e_tamper_test (user_id, firstname, lastname, domain_id, domain_name, _pk, _ck, _version, _deleted)")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][]any{
		{int64(1), str("Egor"), str("Myasnik"), i64(1), str("Approval"), "1", "1", uint64(5), uint8(0)},
		{int64(1), str("Egor"), str("Myasnik"), i64(2), str("Rejection"), "1", "2", uint64(6), uint8(0)},
		{int64(3), (*string)(nil), str(""), (*int64)(nil), (*string)(nil), "3", "", uint64(7), uint8(0)},
		{int64(4), str("gone"), str("x"), i64(9), str("y"), "4", "9", uint64(8), uint8(1)},
		{int64(1), str("Old"), str("Myasnik"), i64(1), str("Approval"), "1", "1", uint64(1), uint8(0)},
	} {
		if err := b.Append(r...); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	want := []Row{
		row("1", "Egor", "Myasnik", "1", "Approval"),
		row("1", "Egor", "Myasnik", "2", "Rejection"),
		row("3", nil, "", nil, nil),
	}
	got, err := c.Rows(ctx, "default", table+"_current")
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(want, got); !d.Equal() {
		t.Fatalf("read back: %s", d.Report(5))
	}
	n, err := c.Tamper(ctx, "default", table)
	if err != nil || n != 2 {
		t.Fatalf("Tamper: %d, %v", n, err)
	}
	got, err = c.Rows(ctx, "default", table+"_current")
	if err != nil {
		t.Fatal(err)
	}
	d := Diff(want, got)
	if d.Equal() || len(d.Missing) != 2 || len(d.Extra) != 1 || d.Extra[0][1].Text != "Egor (corrupted)" {
		t.Fatalf("negative control: %s", d.Report(5))
	}
}
