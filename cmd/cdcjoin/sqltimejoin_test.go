package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

// TestTimeSQLReplayEqualsYAML: one seeded history through the time_join
// YAML form and through the SQL form gives byte-identical --final and
// --bad-records files, for each join type (the bound written a different
// way each time), and both equal the reference; the negative control, the
// SQL form with an upper bound a millisecond lower, differs.
func TestTimeSQLReplayEqualsYAML(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	const ms = 1000
	for _, tc := range []struct {
		join timejoin.JoinType
		on   string
	}{
		{timejoin.Inner, "r.k = l.k AND r.t BETWEEN l.t %s AND l.t %s"},
		{timejoin.LeftOuter, "l.k = r.k AND r.t >= l.t %s AND l.t %s >= r.t"},
		{timejoin.RightOuter, "l.k = r.k AND l.t %[1]s <= r.t AND l.t %[2]s >= r.t"},
		{timejoin.FullOuter, ""},
	} {
		t.Run(tc.join.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(tc.join)))
			s := &timejoin.Spec{Kind: timejoin.Interval, Join: tc.join, Lower: -2 * ms, Upper: 5 * ms,
				OutOfOrderness: 3 * ms, AllowedLateness: 1 * ms, IdleTimeout: 50 * ms, LeftWidth: 1, RightWidth: 1,
				Out: []timejoin.Column{{From: timejoin.FromLeft}, {From: timejoin.FromRight}}}
			events := timegen.Generate(rng, timegen.Options{Kind: s.Kind, N: 2000, OutOfOrderness: 3, Scale: ms})
			dir := t.TempDir()
			input := filepath.Join(dir, "in.jsonl")
			writeHistory(t, input, timegen.Encode(events, timegen.EncodeOptions{Seed: seed}))
			replay := func(name, job string) (final, bad []byte) {
				t.Helper()
				cfg := writeFile(t, dir, name+".yaml", job)
				f, b := filepath.Join(dir, name+".final"), filepath.Join(dir, name+".bad")
				if code, _, errs := run(t, "replay", "--config", cfg, "--input", input, "--final", f, "--bad-records", b, "--end-of-input"); code != 0 {
					t.Fatalf("seed %d: %s: exit %d: %s", seed, name, code, errs)
				}
				final, _ = os.ReadFile(f)
				bad, _ = os.ReadFile(b)
				return final, bad
			}
			yFinal, yBad := replay("yaml", timegen.Config(timegen.ConfigOptions{Name: "tj", Spec: s, StateDir: filepath.Join(dir, "ystate"), DLQ: true}))
			sFinal, sBad := replay("sql", timegen.SQLConfig(timegen.ConfigOptions{Name: "tj", Spec: s, StateDir: filepath.Join(dir, "sstate"), DLQ: true}, tc.on))
			if len(yFinal) == 0 || len(yBad) == 0 {
				t.Fatalf("seed %d: the YAML form emitted %d bytes, %d of bad records", seed, len(yFinal), len(yBad))
			}
			if !bytes.Equal(yFinal, sFinal) || !bytes.Equal(yBad, sBad) {
				t.Fatalf("seed %d: --final %d/%d bytes, --bad-records %d/%d bytes: the forms differ", seed, len(yFinal), len(sFinal), len(yBad), len(sBad))
			}
			want, _ := timegen.Expected(s, events, true, nil, true)
			if got := finalRows(t, filepath.Join(dir, "sql.final"), s); !slices.Equal(got, want) {
				t.Fatalf("seed %d: --final has %d rows, the reference %d", seed, len(got), len(want))
			}
			if tc.join != timejoin.Inner && !bytes.Contains(sFinal, []byte("null")) {
				t.Fatalf("seed %d: an outer join emitted no padded row", seed)
			}
			// Negative control: an upper bound a millisecond lower.
			narrow := *s
			narrow.Upper -= ms
			nFinal, _ := replay("narrow", timegen.SQLConfig(timegen.ConfigOptions{Name: "tj", Spec: &narrow, StateDir: filepath.Join(dir, "nstate"), DLQ: true}, tc.on))
			if bytes.Equal(nFinal, sFinal) {
				t.Fatalf("seed %d: the negative control (upper %v) emitted the same rows", seed, time.Duration(narrow.Upper)*time.Microsecond)
			}
		})
	}
}

// TestTimeSQLExplainAndDDL: explain prints a time join's plan (the
// bound, inputs, watermark, state, emission) the same for both forms, and
// ddl gives the same table.
func TestTimeSQLExplainAndDDL(t *testing.T) {
	dir := t.TempDir()
	out := map[string][2]string{}
	for _, f := range []string{"ad_clicks", "ad_clicks_sql"} {
		data, err := os.ReadFile("../../testdata/timejoin/" + f + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfg := writeFile(t, dir, f+".yaml", string(data)+"clickhouse: {addr: [127.0.0.1:9000]}\n")
		code, explained, errs := run(t, "explain", "--config", cfg)
		if code != 0 {
			t.Fatalf("%s: explain exit %d: %s", f, code, errs)
		}
		code, ddl, errs := run(t, "ddl", "--config", cfg)
		if code != 0 {
			t.Fatalf("%s: ddl exit %d: %s", f, code, errs)
		}
		out[f] = [2]string{explained, ddl}
	}
	y, s := out["ad_clicks"], out["ad_clicks_sql"]
	for _, want := range []string{
		"interval INNER JOIN, left.impression_time + 0s <= right.click_time <= left.impression_time + 30m0s (inclusive)",
		"left: topic ads.impressions (debezium), key [ad_id user_id], time impression_time (timestamp)",
		"max(time) - 10s; a partition is idle after 1m0s without a record; late below watermark - 0s",
		"select: left.impression_id, left.ad_id, left.user_id, right.click_id, right.click_time",
	} {
		if !strings.Contains(s[0], want) {
			t.Errorf("explain of the SQL form lacks %q:\n%s", want, s[0])
		}
	}
	strip := func(e string) string { return e[strings.Index(e, "1 stage"):] }
	if strip(y[0]) != strip(s[0]) || !strings.HasPrefix(s[0], "time join (the query (tables with time))") {
		t.Errorf("explain differs:\n%s\n%s", y[0], s[0])
	}
	if y[1] != s[1] || !strings.Contains(s[1], "_seq UInt64") {
		t.Errorf("ddl differs:\n%s\n%s", y[1], s[1])
	}
}
