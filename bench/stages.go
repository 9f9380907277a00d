package bench

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"strings"
)

// Stage CPU: where a phase's CPU went, per input record.
//
// The bench profiles every point (runtime/pprof, 100 samples per CPU
// second; the phases label their goroutines with pprof.Do, so a sample
// names its phase) and sorts each sample of a phase into a stage by its
// stack, leaf first: the first frame that belongs to a stage's packages
// names the stage (stageOf), so that a runtime function (an allocation, a
// copy) counts for the code that called it. A stage's µs per record is
// its samples' CPU time ÷ the phase's records; "other" is the rest of the
// phase's measured CPU (pipeline CPU seconds minus the labelled samples:
// the driver, garbage collection, unlabelled background work), so the
// stages add up to cpu_seconds_per_million_events. Sampling error: a stage
// with n samples is within about ±2√n samples (95%).

// StageCPU is CPU µs per input record by stage.
type StageCPU struct {
	Decode float64 `json:"decode"`          // Debezium envelope → projected row (debezium, job, the replay reader)
	Key    float64 `json:"key"`             // the keyer: child index, join key, TOAST completion (keyed.Keyer)
	Join   float64 `json:"join"`            // the join operator, fan-outs, hot-key scheduling (keyed, skew)
	State  float64 `json:"state"`           // pebble, the row cache, bulk loads and their sorting (joinstate, bulkload, extsort)
	Sink   float64 `json:"sink"`            // change buffering and encoding (sink, the bench's null sink)
	Kafka  float64 `json:"kafka,omitempty"` // Kafka clients and the in-process broker (--pipeline kafka)
	Other  float64 `json:"other"`           // the rest: drivers, garbage collection, unlabelled work
	// Samples is the number of profile samples of the phase.
	Samples int `json:"samples"`
}

// stage indexes in StageCPU order.
const (
	stDecode = iota
	stKey
	stJoin
	stState
	stSink
	stKafka
	stOther
	stages
)

var stageNames = [stages]string{"decode", "key", "join", "state", "sink", "kafka", "other"}

const mod = "github.com/cdcjoin/cdcjoin/"

// stageRules map function name prefixes to stages; the first rule that
// matches a frame wins, and the leaf-most frame that matches any rule
// names the sample's stage.
var stageRules = []struct {
	prefix string
	stage  int
}{
	{"github.com/cockroachdb/pebble", stState},
	{"github.com/golang/snappy", stState},
	{mod + "joinstate.", stState},
	{mod + "bulkload.", stState},
	{mod + "extsort.", stState},
	{mod + "debezium.", stDecode},
	{mod + "job.(*Decoder)", stDecode},
	{mod + "engine.Decode", stDecode},
	{mod + "engine.(*lineParser)", stDecode},
	{mod + "engine.ReadJSONL", stDecode},
	{mod + "keyed.(*Keyer)", stKey},
	{mod + "keyed.keyOf", stKey},
	{mod + "keyed.pkOf", stKey},
	{mod + "keyed.complete", stKey},
	{mod + "keyed.DecodeIndexEntry", stKey},
	{mod + "keyed.AppendIndexEntry", stKey},
	{mod + "keyed.DecodeParentIndexEntry", stKey},
	{mod + "keyed.AppendParentIndexEntry", stKey},
	{mod + "keyed.", stJoin},
	{mod + "skew.", stJoin},
	{mod + "sink.", stSink},
	{mod + "sink/", stSink},
	{mod + "row.(*Change).AppendJSON", stSink},
	{mod + "bench.(*nullSink)", stSink},
	{mod + "bench.(*probeSink)", stSink},
	{mod + "bench.timedSink", stSink},
	{"github.com/twmb/franz-go", stKafka},
}

// stageOf returns the stage of a sample's stack (function names, leaf
// first).
func stageOf(stack []string) int {
	for _, fn := range stack {
		for _, r := range stageRules {
			if strings.HasPrefix(fn, r.prefix) {
				return r.stage
			}
		}
	}
	return stOther
}

// stageProfile is the CPU profile of one point in progress.
type stageProfile struct {
	buf bytes.Buffer
	on  bool
}

// startStageProfile starts profiling the process; when a CPU profile is
// already running (a caller's own), stage figures are left out.
func startStageProfile() *stageProfile {
	sp := &stageProfile{}
	sp.on = pprof.StartCPUProfile(&sp.buf) == nil
	return sp
}

// stop ends the profile and returns it (nil when none was taken).
func (sp *stageProfile) stop() []byte {
	if !sp.on {
		return nil
	}
	pprof.StopCPUProfile()
	sp.on = false
	return sp.buf.Bytes()
}

// stageCPU fills each phase's Stages from a profile of the point: the
// samples labelled phase=<name> (the first round of a phase name: a
// storm's later rounds are named name#2, … and labelled alike).
func stageCPU(prof []byte, phases []Phase) error {
	by, err := stageSamples(prof)
	if err != nil {
		return err
	}
	for i := range phases {
		ph := &phases[i]
		s, ok := by[ph.Name]
		if !ok || ph.Events == 0 {
			continue
		}
		per := func(ns int64) float64 { return float64(ns) / 1e3 / float64(ph.Events) }
		st := &StageCPU{Decode: per(s.ns[stDecode]), Key: per(s.ns[stKey]), Join: per(s.ns[stJoin]),
			State: per(s.ns[stState]), Sink: per(s.ns[stSink]), Kafka: per(s.ns[stKafka]), Samples: s.n}
		var labelled int64
		for _, ns := range s.ns[:stOther] {
			labelled += ns
		}
		st.Other = max(0, ph.CPUSeconds*1e9-float64(labelled)) / 1e3 / float64(ph.Events)
		ph.Stages = st
	}
	return nil
}

// phaseSamples are one phase's samples by stage.
type phaseSamples struct {
	ns [stages]int64 // CPU nanoseconds
	n  int           // samples
}

// stageSamples sorts a profile's samples by their phase label and stage.
func stageSamples(prof []byte) (map[string]*phaseSamples, error) {
	p, err := parseProfile(prof)
	if err != nil {
		return nil, err
	}
	phaseKey := p.stringIndex("phase")
	out := map[string]*phaseSamples{}
	var stack []string
	for _, s := range p.samples {
		name := ""
		for _, l := range s.labels {
			if l.key == phaseKey && phaseKey >= 0 && int(l.str) < len(p.strings) {
				name = p.strings[l.str]
			}
		}
		if name == "" {
			continue
		}
		stack = stack[:0]
		for _, id := range s.locs {
			stack = append(stack, p.locs[id]...)
		}
		ps := out[name]
		if ps == nil {
			ps = &phaseSamples{}
			out[name] = ps
		}
		ns := int64(0)
		if len(s.values) > 1 {
			ns = s.values[1]
		}
		ps.ns[stageOf(stack)] += ns
		ps.n++
	}
	return out, nil
}

// profile is the part of a pprof profile (profile.proto) stage figures
// need.
type profile struct {
	samples []profSample
	locs    map[uint64][]string // location → function names, leaf (inlined) first
	strings []string
}

type profSample struct {
	locs   []uint64
	values []int64
	labels []profLabel
}

type profLabel struct{ key, str int64 }

func (p *profile) stringIndex(s string) int64 {
	for i, v := range p.strings {
		if v == s {
			return int64(i)
		}
	}
	return -1
}

var errProfile = errors.New("cdcjoin: bench: malformed CPU profile")

// parseProfile decodes a gzipped profile.proto: samples (locations,
// values, labels), locations (their lines' functions) and the string
// table; everything else is skipped.
func parseProfile(gz []byte) (*profile, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: bench: CPU profile: %w", err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: bench: CPU profile: %w", err)
	}
	p := &profile{locs: map[uint64][]string{}}
	locFuncs := map[uint64][]uint64{}
	funcName := map[uint64]int64{}
	err = fields(b, func(num int, wire int, v uint64, sub []byte) error {
		switch num {
		case 2: // sample
			var s profSample
			err := fields(sub, func(num, wire int, v uint64, sub []byte) error {
				switch num {
				case 1:
					s.locs = appendVarints(s.locs, wire, v, sub)
				case 2:
					for _, x := range appendVarints(nil, wire, v, sub) {
						s.values = append(s.values, int64(x))
					}
				case 3:
					var l profLabel
					err := fields(sub, func(num, _ int, v uint64, _ []byte) error {
						switch num {
						case 1:
							l.key = int64(v)
						case 2:
							l.str = int64(v)
						}
						return nil
					})
					s.labels = append(s.labels, l)
					return err
				}
				return nil
			})
			p.samples = append(p.samples, s)
			return err
		case 4: // location
			var id uint64
			var fns []uint64
			err := fields(sub, func(num, _ int, v uint64, sub []byte) error {
				switch num {
				case 1:
					id = v
				case 4: // line
					return fields(sub, func(num, _ int, v uint64, _ []byte) error {
						if num == 1 {
							fns = append(fns, v)
						}
						return nil
					})
				}
				return nil
			})
			locFuncs[id] = fns
			return err
		case 5: // function
			var id uint64
			var name int64
			err := fields(sub, func(num, _ int, v uint64, _ []byte) error {
				switch num {
				case 1:
					id = v
				case 2:
					name = int64(v)
				}
				return nil
			})
			funcName[id] = name
			return err
		case 6: // string table
			p.strings = append(p.strings, string(sub))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for id, fns := range locFuncs {
		names := make([]string, 0, len(fns))
		for _, f := range fns {
			if n, ok := funcName[f]; ok && n >= 0 && int(n) < len(p.strings) {
				names = append(names, p.strings[n])
			}
		}
		p.locs[id] = names
	}
	return p, nil
}

// fields walks the fields of one protobuf message: fn gets each field's
// number, wire type and either its varint value (wire type 0) or its bytes
// (wire type 2); fixed-width fields are skipped.
func fields(b []byte, fn func(num, wire int, v uint64, sub []byte) error) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return errProfile
		}
		b = b[n:]
		num, wire := int(key>>3), int(key&7)
		var v uint64
		var sub []byte
		switch wire {
		case 0:
			v, n = binary.Uvarint(b)
			if n <= 0 {
				return errProfile
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return errProfile
			}
			b = b[8:]
			continue
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return errProfile
			}
			sub, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return errProfile
			}
			b = b[4:]
			continue
		default:
			return errProfile
		}
		if err := fn(num, wire, v, sub); err != nil {
			return err
		}
	}
	return nil
}

// appendVarints appends a repeated varint field's values: one value
// (wire type 0) or a packed run (wire type 2).
func appendVarints(dst []uint64, wire int, v uint64, sub []byte) []uint64 {
	if wire == 0 {
		return append(dst, v)
	}
	for len(sub) > 0 {
		x, n := binary.Uvarint(sub)
		if n <= 0 {
			break
		}
		dst, sub = append(dst, x), sub[n:]
	}
	return dst
}
