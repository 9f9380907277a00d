package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

// TestCanonicalForms: what PostgreSQL prints and what ClickHouse prints for
// the same value (18.16's fallback types and a current server's types,
// as seen in sink/clickhouse/testdata) have one canonical form, and
// different values do not.
func TestCanonicalForms(t *testing.T) {
	for _, tc := range []struct {
		class, elem class
		pg          string
		ch          []string // 18.16, current
	}{
		{cInt, 0, "-9223372036854775808", []string{"-9223372036854775808"}},
		{cDecimal, 0, "12.3400", []string{"12.3400", "12.34"}},
		{cDecimal, 0, "-12.340", []string{"-12.34"}},
		{cDecimal, 0, "0.0000", []string{"0.0000", "0"}},
		{cDecimal, 0, "2.00", []string{"2.00", "2"}},
		{cDecimal, 0, "123456789012345678901234567890.123456789", []string{"123456789012345678901234567890.123456789"}},
		{cFloat32, 0, "3.4028235e+38", []string{"3.4028235e38"}},
		{cFloat32, 0, "1e-37", []string{"1e-37"}},
		{cFloat32, 0, "NaN", []string{"nan"}},
		{cFloat32, 0, "-Infinity", []string{"-inf"}},
		{cFloat64, 0, "Infinity", []string{"inf"}},
		{cFloat64, 0, "-0", []string{"-0"}},
		{cFloat64, 0, "5e-324", []string{"5e-324"}},
		{cFloat64, 0, "1.7976931348623157e+308", []string{"1.7976931348623157e308"}},
		{cBool, 0, "true", []string{"1", "true"}},
		{cBool, 0, "false", []string{"0", "false"}},
		{cText, 0, "it's \"quoted\"", []string{"it's \"quoted\""}},
		{cBytes, 0, "5c27226e756c6c00", []string{"\\'\"null\x00"}},
		{cBytes, 0, "", []string{""}},
		{cDate, 0, "1955-11-05", []string{"-5171", "1955-11-05"}},
		{cDate, 0, "2299-12-31", []string{"120529", "2299-12-31"}},
		{cTime, 0, "23:59:59.999999", []string{"86399999999"}},
		{cTime, 0, "00:00:01", []string{"1000000"}},
		{cTimestamp, 0, "-446751899999999", []string{"-446751899999999", "1955-11-05 06:15:00.000001"}},
		{cTimestamp, 0, "946684800000000", []string{"946684800000000", "2000-01-01 00:00:00.000000"}},
		{cInterval, 0, "-36572706000007", []string{"-36572706000007"}},
		{cArray, cInt, "[-2147483648,null,2147483647]", []string{"[-2147483648,NULL,2147483647]"}},
		{cArray, cText, `[null,"NULL","","a,b","q\"uote","back\\slash"]`, []string{`[NULL,'NULL','','a,b','q"uote','back\\slash']`}},
		{cArray, cText, `["it's"]`, []string{`['it\'s']`}},
		{cArray, cDate, `["1955-11-05",null]`, []string{"[-5171,NULL]", "['1955-11-05',NULL]"}},
		{cArray, cText, `[]`, []string{`[]`}},
	} {
		want, err := canonical(tc.class, tc.elem, tc.pg, pgSide)
		if err != nil {
			t.Errorf("PostgreSQL %q: %v", tc.pg, err)
			continue
		}
		for _, c := range tc.ch {
			got, err := canonical(tc.class, tc.elem, c, chSide)
			if err != nil || got != want {
				t.Errorf("ClickHouse %q → %q (%v); PostgreSQL %q → %q", c, got, err, tc.pg, want)
			}
		}
	}
	// Different values stay different.
	for _, tc := range []struct {
		class, elem class
		a, b        string
	}{
		{cDecimal, 0, "12.34", "12.3401"},
		{cFloat32, 0, "NaN", "Infinity"},
		{cFloat64, 0, "-0", "0"},
		{cDate, 0, "1955-11-05", "1955-11-06"},
		{cArray, cText, `[null]`, `[""]`},
		{cArray, cText, `["NULL"]`, `[null]`},
	} {
		a, err1 := canonical(tc.class, tc.elem, tc.a, pgSide)
		b, err2 := canonical(tc.class, tc.elem, tc.b, pgSide)
		if err1 != nil || err2 != nil || a == b {
			t.Errorf("%q and %q: %q %q %v %v", tc.a, tc.b, a, b, err1, err2)
		}
	}
	if _, err := parseCHArray(`['open`); err == nil {
		t.Error("unterminated array string accepted")
	}
}

// TestTypedJoinOnPostgres applies types.sql and types-dml.sql (one
// transaction per statement, as the e2e does) to a real PostgreSQL and
// reads the typed oracle: every column converts to its canonical form, and
// a few values are what the fixtures' README says.
func TestTypedJoinOnPostgres(t *testing.T) {
	dsn := testenv.Require(t, testenv.PostgresEnv, "PostgreSQL")
	ctx := context.Background()
	const db = "e2e_types_test"
	if err := RecreateDatabase(ctx, dsn, db, "../deploy/local/schema.sql"); err != nil {
		t.Fatal(err)
	}
	tdsn, err := WithDatabase(dsn, db)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := OpenPostgres(ctx, tdsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	if err := pg.ExecFile(ctx, "../deploy/local/types.sql"); err != nil {
		t.Fatal(err)
	}
	txs, err := Statements("../deploy/local/types-dml.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(txs) < 10 {
		t.Fatalf("%d statements", len(txs))
	}
	for _, tx := range txs {
		if strings.HasSuffix(tx.Stmts[0].SQL, ";") {
			t.Errorf("%s keeps its ';'", tx.Name)
		}
		if _, _, err := pg.Apply(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := pg.Apply(ctx, TypedMarker(1)); err != nil {
		t.Fatal(err)
	}
	rows, err := pg.TypedJoin(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Row{}
	for _, r := range rows {
		byID[r[0].Text] = r
	}
	col := func(id, name string) string {
		for i, c := range TypedColumns {
			if c.name == name {
				return byID[id][i].Text
			}
		}
		t.Fatalf("no column %s", name)
		return ""
	}
	for _, tc := range []struct{ id, col, want string }{
		{"2", "d", "1955-11-05"}, {"5", "f4", "NaN"}, {"6", "f4", "+Inf"}, {"7", "iv", "2629800000000"},
		{"3", "ai", `["-2147483648",null,"2147483647"]`}, {"4", "ai", "[]"}, {"1", "num", "12.34"},
		{"2", "tstz", "-1"}, {"3", "b", "5c27226e756c6c00"}, {"6", "born", "1955-11-05"},
	} {
		if got := col(tc.id, tc.col); got != tc.want {
			t.Errorf("parent %s %s = %s, want %s", tc.id, tc.col, got, tc.want)
		}
	}
	if len(rows) != 8 {
		t.Errorf("%d joined rows, want 8", len(rows))
	}
}
