package kafkarun

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/metrics"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/skew"
)

// Hot-key metrics: the owned partitions' salted keys and backlogs, and the
// keying stage's busiest join keys.

// skewSnapshot gathers the owned partitions' hot keys and backlogs (safe on
// any goroutine).
func (j *joinStage) skewSnapshot() (hot []metrics.HotKeyStat, fanout int, waiting uint64) {
	ws := j.owned()
	for _, w := range ws {
		s := w.hot.Load()
		if s == nil {
			continue
		}
		fanout += s.busy
		waiting += s.waiting
		for _, h := range s.keys {
			hot = append(hot, metrics.HotKeyStat{Key: keyText(j.spec, h.JoinKey), Partition: strconv.Itoa(int(w.p)),
				Children: h.Children, Salts: h.Salts, Cooling: h.Cooling})
		}
	}
	return hot, fanout, waiting
}

// busyKeys tracks the keying stage's busiest join keys (a Space-Saving
// sketch of its keyed inputs, halved every minute) and publishes the
// heaviest for the metrics collector. Add and publish run on the keying
// goroutine; snapshot on any.
type busyKeys struct {
	spec   *keyed.Spec
	top    int
	sketch *skew.SpaceSaving
	decay  time.Time
	snap   atomic.Pointer[[]metrics.BusyKeyStat]
}

func newBusyKeys(spec *keyed.Spec, top int) *busyKeys {
	return &busyKeys{spec: spec, top: top, sketch: skew.NewSpaceSaving(max(4*top, 32)), decay: time.Now()}
}

func (b *busyKeys) add(jk []byte) { b.sketch.Add(jk, 1) }

// publish ages the counts once a minute and publishes the heaviest keys.
func (b *busyKeys) publish(now time.Time) {
	for now.Sub(b.decay) >= time.Minute {
		b.sketch.Decay(0.5)
		b.decay = b.decay.Add(time.Minute)
	}
	top := b.sketch.Top(b.top)
	out := make([]metrics.BusyKeyStat, len(top))
	for i, h := range top {
		out[i] = metrics.BusyKeyStat{Key: keyText(b.spec, []byte(h.Key)), Events: h.Count}
	}
	b.snap.Store(&out)
}

func (b *busyKeys) snapshot() []metrics.BusyKeyStat {
	if s := b.snap.Load(); s != nil {
		return *s
	}
	return nil
}

// hotSnapshot is what a worker last published about its hot keys.
type hotSnapshot struct {
	keys    []skew.HotKey
	busy    int
	waiting uint64
}

// keyText renders an encoded join key for logs and metrics.
func keyText(spec *keyed.Spec, jk []byte) string {
	vals, _, err := row.DecodeKey(nil, jk, len(spec.ParentKey))
	if err != nil {
		return fmt.Sprintf("%x", jk)
	}
	var b []byte
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, v.Text()...)
	}
	return string(b)
}
