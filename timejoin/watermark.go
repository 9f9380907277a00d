package timejoin

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// Source names a source partition: a side and a partition of its topic.
type Source struct {
	Side      Side
	Partition int32
}

func (s Source) String() string { return fmt.Sprintf("%s/%d", s.Side, s.Partition) }

// partition is one source partition's watermark state.
type partition struct {
	src Source
	// max is the largest event time seen (MinTime: none yet).
	max int64
	// lastSeen is the largest event time seen in any partition when this
	// one's latest record (or its declaration) was observed; MinTime until
	// some partition has a record.
	lastSeen int64
	// idle is the driver's decision (SetIdle); a record clears it.
	idle bool
}

// Watermarks tracks the watermark of every source partition and combines
// them into the join's watermark (see the package documentation). The zero
// value is not usable: see newWatermarks. Not safe for concurrent use.
type Watermarks struct {
	ooo, idleTimeout int64
	parts            []*partition // in first-seen order
	index            map[Source]*partition
	w                int64 // the join's watermark, monotone
	globalMax        int64 // the largest event time seen in any partition
	end              bool  // end of input: W = +∞ for good
	dirty            bool  // changed since the last save
}

func newWatermarks(ooo, idleTimeout int64) Watermarks {
	return Watermarks{ooo: ooo, idleTimeout: idleTimeout, index: map[Source]*partition{}, w: MinTime, globalMax: MinTime}
}

// W returns the join's watermark.
func (m *Watermarks) W() int64 { return m.w }

// part returns src's state, creating it (active, no records) when new.
func (m *Watermarks) part(src Source) *partition {
	if p := m.index[src]; p != nil {
		return p
	}
	p := &partition{src: src, max: MinTime, lastSeen: m.globalMax}
	m.parts = append(m.parts, p)
	m.index[src] = p
	m.dirty = true
	return p
}

// declare makes src known (holding the watermark back until it has records
// or is idle) and reports whether it was new.
func (m *Watermarks) declare(src Source) bool {
	if m.index[src] != nil {
		return false
	}
	m.part(src)
	m.recompute()
	return true
}

// observe records an event at time t in src (a record, or the driver's
// word that src reached t), which makes src active, and recomputes W.
func (m *Watermarks) observe(src Source, t int64) {
	p := m.part(src)
	if t > p.max {
		p.max = t
		m.dirty = true
	}
	if t > m.globalMax {
		if m.globalMax == MinTime {
			// The first event anywhere: the idle time of partitions
			// declared before starts now.
			for _, q := range m.parts {
				q.lastSeen = t
			}
		}
		m.globalMax = t
		m.dirty = true
	}
	if p.idle || p.lastSeen != m.globalMax {
		p.idle, p.lastSeen = false, m.globalMax
		m.dirty = true
	}
	m.recompute()
}

// setIdle records the driver's idleness decision for src.
func (m *Watermarks) setIdle(src Source, idle bool) {
	p := m.part(src)
	if p.idle != idle {
		p.idle = idle
		if !idle {
			p.lastSeen = m.globalMax
		}
		m.dirty = true
	}
	m.recompute()
}

// isIdle reports whether p is idle now.
func (m *Watermarks) isIdle(p *partition) bool {
	if p.idle {
		return true
	}
	if m.idleTimeout <= 0 || p.lastSeen == MinTime {
		return false
	}
	return addTime(p.lastSeen, m.idleTimeout) <= m.globalMax
}

// recompute raises W to the minimum watermark of the active partitions;
// when every partition is idle, to the largest watermark of any (none can
// hold the others back any more: Flink's watermark valve does the same),
// so that the order in which partitions go idle together does not matter.
func (m *Watermarks) recompute() {
	if m.end {
		return
	}
	min, any := MaxTime, false
	top := MinTime
	for _, p := range m.parts {
		wm := addTime(p.max, -m.ooo)
		if p.max > MinTime {
			top = max(top, wm)
		}
		if m.isIdle(p) {
			continue
		}
		any = true
		if wm < min {
			min = wm
		}
	}
	if !any {
		min = top
	}
	if min > m.w {
		m.w = min
		m.dirty = true
	}
}

// endOfInput moves W to +∞ for good.
func (m *Watermarks) endOfInput() {
	if !m.end {
		m.end, m.w, m.dirty = true, MaxTime, true
	}
}

// Partitions calls fn for every known partition, in (side, partition)
// order, with its largest event time, its watermark and whether it is idle.
func (m *Watermarks) Partitions(fn func(src Source, max, watermark int64, idle bool)) {
	ps := append([]*partition(nil), m.parts...)
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].src.Side != ps[j].src.Side {
			return ps[i].src.Side < ps[j].src.Side
		}
		return ps[i].src.Partition < ps[j].src.Partition
	})
	for _, p := range ps {
		fn(p.src, p.max, addTime(p.max, -m.ooo), m.isIdle(p))
	}
}

// Encoding (the 'm' entry metaWatermarks):
//
//	version 0x01, flags (bit 0: end of input), W, globalMax (8 bytes each,
//	big-endian), uvarint partition count, per partition: side byte,
//	partition (4 bytes), max, lastSeen (8 bytes each), idle byte.
func (m *Watermarks) appendBinary(b []byte) []byte {
	b = append(b, 0x01, 0)
	if m.end {
		b[len(b)-1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, uint64(m.w))
	b = binary.BigEndian.AppendUint64(b, uint64(m.globalMax))
	b = binary.AppendUvarint(b, uint64(len(m.parts)))
	for _, p := range m.parts {
		b = append(b, byte(p.src.Side))
		b = binary.BigEndian.AppendUint32(b, uint32(p.src.Partition))
		b = binary.BigEndian.AppendUint64(b, uint64(p.max))
		b = binary.BigEndian.AppendUint64(b, uint64(p.lastSeen))
		idle := byte(0)
		if p.idle {
			idle = 1
		}
		b = append(b, idle)
	}
	return b
}

func (m *Watermarks) unmarshal(b []byte) error {
	bad := fmt.Errorf("%w: watermarks", errCorrupt)
	if len(b) < 18 || b[0] != 0x01 {
		return bad
	}
	*m = newWatermarks(m.ooo, m.idleTimeout)
	m.end = b[1]&1 != 0
	m.w = int64(binary.BigEndian.Uint64(b[2:]))
	m.globalMax = int64(binary.BigEndian.Uint64(b[10:]))
	n, k := binary.Uvarint(b[18:])
	if k <= 0 {
		return bad
	}
	b = b[18+k:]
	for i := uint64(0); i < n; i++ {
		if len(b) < 22 {
			return bad
		}
		p := &partition{
			src:      Source{Side: Side(b[0]), Partition: int32(binary.BigEndian.Uint32(b[1:]))},
			max:      int64(binary.BigEndian.Uint64(b[5:])),
			lastSeen: int64(binary.BigEndian.Uint64(b[13:])),
			idle:     b[21] == 1,
		}
		if p.src.Side != SideLeft && p.src.Side != SideRight {
			return bad
		}
		m.parts = append(m.parts, p)
		m.index[p.src] = p
		b = b[22:]
	}
	if len(b) != 0 {
		return bad
	}
	return nil
}
