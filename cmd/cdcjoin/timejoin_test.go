package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
)

// writeHistory writes an encoded history as a replay input file.
func writeHistory(t testing.TB, path string, recs []timegen.Record) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for _, r := range recs {
		w.WriteString(r.JSONL() + "\n")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// finalRows reads a --final file of timegen's select list (lv, rv, ws, we)
// as timegen.Text renders rows.
func finalRows(t testing.TB, path string, s *timejoin.Spec) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		var b strings.Builder
		for _, c := range s.Out {
			name := map[timejoin.From]string{timejoin.FromLeft: "lv", timejoin.FromRight: "rv", timejoin.FromWindowStart: "ws", timejoin.FromWindowEnd: "we"}[c.From]
			switch v := m[name].(type) {
			case nil:
				b.WriteString("null,")
			case string:
				if c.From == timejoin.FromWindowStart || c.From == timejoin.FromWindowEnd {
					fmt.Fprintf(&b, "w%s,", v) // compared by count only below
				} else {
					b.WriteString(v + ",")
				}
			}
		}
		out = append(out, b.String())
	}
	slices.Sort(out)
	return out
}

// TestTimeReplay replays an interval join's history through the command:
// --final holds the reference's rows (after --end-of-input), --bad-records
// every late record with reason late, the closing line counts them.
func TestTimeReplay(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const ms = 1000
	s := &timejoin.Spec{Kind: timejoin.Interval, Join: timejoin.LeftOuter, Lower: -2 * ms, Upper: 5 * ms,
		OutOfOrderness: 3 * ms, AllowedLateness: 1 * ms, IdleTimeout: 50 * ms, LeftWidth: 1, RightWidth: 1,
		Out: []timejoin.Column{{From: timejoin.FromLeft}, {From: timejoin.FromRight}}}
	events := timegen.Generate(rng, timegen.Options{Kind: s.Kind, N: 3000, OutOfOrderness: 3, Scale: ms})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	writeHistory(t, input, timegen.Encode(events, timegen.EncodeOptions{Seed: seed}))
	cfg := writeFile(t, dir, "job.yaml", timegen.Config(timegen.ConfigOptions{Name: "tj", Spec: s, StateDir: filepath.Join(dir, "state"), DLQ: true}))
	final, bad := filepath.Join(dir, "final.jsonl"), filepath.Join(dir, "bad.jsonl")
	code, _, errs := run(t, "replay", "--config", cfg, "--input", input, "--final", final, "--bad-records", bad, "--end-of-input")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want, late := timegen.Expected(s, events, true, nil, true)
	if got := finalRows(t, final, s); !slices.Equal(got, want) {
		t.Fatalf("--final has %d rows, want %d", len(got), len(want))
	}
	data, _ := os.ReadFile(bad)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(late) == 0 || len(lines) != len(late) {
		t.Fatalf("%d bad records, %d late events", len(lines), len(late))
	}
	for _, l := range lines {
		if !strings.Contains(l, `"reason":"late","time":"`) || !strings.Contains(l, `"watermark":"`) {
			t.Fatalf("bad record without reason, time and watermark: %s", l)
		}
	}
	if !strings.Contains(errs, fmt.Sprintf(" %d late records (%s %d, %s %d)", len(late), timegen.LeftTopic, countSide(events, late, timejoin.SideLeft),
		timegen.RightTopic, countSide(events, late, timejoin.SideRight))) {
		t.Errorf("closing line: %s", errs)
	}
}

func countSide(events []timegen.Event, idx []int, side timejoin.Side) int {
	n := 0
	for _, i := range idx {
		if events[i].Side == side {
			n++
		}
	}
	return n
}

// TestTimeReplayContract runs the job verbatim on hand-written
// Debezium records (schemas off, timestamp as int64 µs): a click exactly
// 30 minutes after its impression joins, one a microsecond later does
// not, a late impression is a bad record; --final is one JSON object per
// emitted row keyed by the select names.
func TestTimeReplayContract(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../../testdata/timejoin/ad_clicks.yaml") // the job, verbatim
	if err != nil {
		t.Fatal(err)
	}
	job := strings.Replace(string(data), "./state/ad_clicks", filepath.Join(dir, "state"), 1)
	cfg := writeFile(t, dir, "job.yaml", job)
	const t0 = int64(1714557600000000) // 2024-05-01T10:00:00Z
	imp := func(p, off int, id, ad, user int, at int64) string {
		return fmt.Sprintf(`{"topic":"ads.impressions","partition":%d,"offset":%d,"key":{"impression_id":%d},"value":{"before":null,"after":{"impression_id":%d,"ad_id":%d,"user_id":%d,"impression_time":%d},"source":{"ts_ms":%d},"op":"c"}}`,
			p, off, id, id, ad, user, at, at/1000)
	}
	click := func(p, off int, id, ad, user int, at int64, op string) string {
		return fmt.Sprintf(`{"topic":"ads.clicks","partition":%d,"offset":%d,"key":{"click_id":%d},"value":{"before":null,"after":{"click_id":%d,"ad_id":%d,"user_id":%d,"click_time":%d},"source":{"ts_ms":%d},"op":%q}}`,
			p, off, id, id, ad, user, at, at/1000, op)
	}
	const min = int64(60_000_000)
	input := writeFile(t, dir, "in.jsonl", strings.Join([]string{
		imp(0, 0, 1, 7, 3, t0),
		imp(0, 1, 2, 8, 3, t0),
		click(0, 0, 100, 7, 3, t0+30*min, "c"),   // exactly at the bound: joins
		click(0, 1, 101, 8, 3, t0+30*min+1, "r"), // a microsecond past: no pair (op r counts as c)
		imp(0, 2, 3, 7, 3, t0+40*min),
		// 11 s behind its partition: behind the watermark (out_of_orderness
		// 10 s; the clicks' partition is idle, 10 minutes of event time
		// behind, more than idle_timeout).
		imp(0, 3, 4, 7, 3, t0+40*min-11_000_000),
		click(0, 2, 102, 7, 3, t0+41*min, "c"),
	}, "\n")+"\n")
	final, bad := filepath.Join(dir, "final.jsonl"), filepath.Join(dir, "bad.jsonl")
	code, _, errs := run(t, "replay", "--config", cfg, "--input", input, "--final", final, "--bad-records", bad)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	got, _ := os.ReadFile(final)
	want := `{"impression_id":1,"ad_id":7,"user_id":3,"click_id":100,"click_time":"2024-05-01T10:30:00.000000Z"}
{"impression_id":3,"ad_id":7,"user_id":3,"click_id":102,"click_time":"2024-05-01T10:41:00.000000Z"}
`
	if string(got) != want {
		t.Errorf("--final:\n%s\nwant:\n%s", got, want)
	}
	b, _ := os.ReadFile(bad)
	if !strings.Contains(string(b), `"topic":"ads.impressions","partition":0,"offset":3`) ||
		!strings.Contains(string(b), `"reason":"late","time":"2024-05-01T10:39:49.000000Z","watermark":"2024-05-01T10:39:50.000000Z"`) {
		t.Errorf("bad records: %s", b)
	}
	if !strings.Contains(errs, "1 late records (ads.impressions 1)") {
		t.Errorf("closing line: %s", errs)
	}
	// An append-only side refuses updates.
	input2 := writeFile(t, dir, "in2.jsonl", click(1, 0, 200, 7, 3, t0, "u")+"\n")
	code, _, errs = run(t, "replay", "--config", writeFile(t, dir, "job2.yaml", strings.Replace(job, "policy: dlq, dlq_topic: ad_clicks.dlq", "policy: stop", 1)), "--input", input2, "--resume")
	if code == 0 || !strings.Contains(errs, "append-only") || !strings.Contains(errs, "ads.clicks/1@0") {
		t.Errorf("an update on an append-only side: exit %d, %s", code, errs)
	}
}
