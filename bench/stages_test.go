package bench

import (
	"context"
	"runtime/pprof"
	"testing"
	"time"
)

func TestStageOf(t *testing.T) {
	for _, tc := range []struct {
		stack []string
		want  int
	}{
		{[]string{"runtime.mallocgc", mod + "debezium.(*Decoder).Decode", mod + "engine.Decode"}, stDecode},
		{[]string{"runtime.memmove", "github.com/cockroachdb/pebble/v2.(*Batch).Set", mod + "joinstate.(*Txn).set", mod + "keyed.(*Keyer).child"}, stState},
		{[]string{mod + "row.DecodeRow", mod + "keyed.DecodeChild", mod + "keyed.(*Join).childUpsert"}, stJoin},
		{[]string{mod + "row.AppendKey", mod + "keyed.keyOf", mod + "keyed.(*Keyer).child"}, stKey},
		{[]string{mod + "keyed.(*Keyer).child", mod + "engine.(*Engine).apply"}, stKey},
		{[]string{mod + "row.(*Change).AppendJSON", mod + "bench.(*nullSink).Write"}, stSink},
		{[]string{"runtime.gcBgMarkWorker"}, stOther},
		{[]string{mod + "engine.(*Engine).Apply"}, stOther},
	} {
		if got := stageOf(tc.stack); got != tc.want {
			t.Errorf("stageOf(%v) = %s, want %s", tc.stack, stageNames[got], stageNames[tc.want])
		}
	}
}

// TestStageCPU profiles labelled work and finds its samples under its
// phase, with the phase's CPU split so that the stages add up.
func TestStageCPU(t *testing.T) {
	sp := startStageProfile()
	if !sp.on {
		t.Skip("a CPU profile is already running")
	}
	pprof.Do(context.Background(), pprof.Labels("phase", "spin"), func(context.Context) {
		end := time.Now().Add(300 * time.Millisecond)
		x := 1
		for time.Now().Before(end) {
			for i := 0; i < 1000; i++ {
				x = x*31 + i
			}
		}
		_ = x
	})
	prof := sp.stop()
	phases := []Phase{{Name: "spin", Events: 1000, CPUSeconds: 0.3, CPUSecondsPerMillion: 300}, {Name: "absent", Events: 1}}
	if err := stageCPU(prof, phases); err != nil {
		t.Fatal(err)
	}
	st := phases[0].Stages
	if st == nil || st.Samples == 0 {
		t.Fatalf("no samples of the labelled phase: %+v", st)
	}
	sum := st.Decode + st.Key + st.Join + st.State + st.Sink + st.Kafka + st.Other
	if sum < 299 || sum > 301 && st.Other > 0 {
		t.Errorf("stages %+v add up to %.1f µs/record, want the phase's 300 (all of it other)", st, sum)
	}
	if phases[1].Stages != nil {
		t.Errorf("a phase without samples got stages %+v", phases[1].Stages)
	}
}
