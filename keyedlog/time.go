package keyedlog

import (
	"encoding/binary"
	"fmt"

	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

// A time join's records (package timejoin), written by its keying stage:
//
//	'X' side time(8) len(jk) jk pk       an event (or a temporal right change), partition Partition(jk)
//	'W' side partition(4) writer         a source partition's watermark, to every partition
//
// Values:
//
//	'X': op(1), flags(1: bit 0 the key has a NULL), source partition(4),
//	     source offset(8), uvarint len + the source record's key, the
//	     projected row (row.AppendRow; none for deletes and truncates)
//	'W': the largest event time seen in the source partition (8), idle(1)
//
// The source position and key are there for a late record's dead letter.
// time is 8 bytes big-endian with the sign bit flipped. A time join's
// keyed topic is not a changelog (its rows expire by time): it is created
// with time-based retention, not compaction.
const (
	recTime      = 'X'
	recWatermark = 'W'
)

// The time join's message kinds.
const (
	// KindTime is a time join's input (Msg.Time, Msg.Source).
	KindTime Kind = 16 + iota
	// KindWatermark is what a keying stage knows of a source partition
	// (Msg.Watermark).
	KindWatermark
)

// TimeSource is where a time record came from.
type TimeSource struct {
	Partition int32
	Offset    int64
	Key       []byte // the source record's key
}

// Watermark is a 'W' record: source partition Source has seen event
// times up to Max (timejoin.MinTime: none yet) and is idle or not.
type Watermark struct {
	Source timejoin.Source
	Max    int64
	Idle   bool
}

func appendTimeBytes(b []byte, t int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(t)^(1<<63))
}

// AppendTime appends the key and returns the value (appended to val) of
// the record of r, read from src.
func AppendTime(key, val []byte, r *timejoin.Record, src TimeSource) ([]byte, []byte) {
	key = append(appendTimeBytes(append(key, recTime, byte(r.Side)), r.Time), 0)
	key = binary.AppendUvarint(key[:len(key)-1], uint64(len(r.Key)))
	key = append(append(key, r.Key...), r.PK...)
	flags := byte(0)
	if r.KeyNull {
		flags = 1
	}
	val = append(val, byte(r.Op), flags)
	val = binary.BigEndian.AppendUint32(val, uint32(src.Partition))
	val = binary.BigEndian.AppendUint64(val, uint64(src.Offset))
	val = append(binary.AppendUvarint(val, uint64(len(src.Key))), src.Key...)
	if r.Op == timejoin.Insert {
		val = row.AppendRow(val, r.Row)
	}
	return key, val
}

// AppendWatermark appends the key and value of w's record; writer names
// the keying instance (records of several writers for one partition, in a
// rebalance, are all valid: a partition's watermark only rises).
func AppendWatermark(key, val []byte, w *Watermark, writer string) ([]byte, []byte) {
	key = binary.BigEndian.AppendUint32(append(key, recWatermark, byte(w.Source.Side)), uint32(w.Source.Partition))
	key = append(key, writer...)
	val = appendTimeBytes(val, w.Max)
	idle := byte(0)
	if w.Idle {
		idle = 1
	}
	return key, append(val, idle)
}

// decodeTime decodes an 'X' record into m.Time and m.Source (aliasing key
// and value; the row into m.Time.Row's buffer).
func decodeTime(key, value []byte, m *Msg) error {
	if len(key) < 11 {
		return fmt.Errorf("time record key too short (%d bytes)", len(key))
	}
	r := &m.Time
	r.Side, r.Partition = timejoin.Side(key[1]), 0
	if r.Side != timejoin.SideLeft && r.Side != timejoin.SideRight {
		return fmt.Errorf("time record of side %q", key[1])
	}
	r.Time = int64(binary.BigEndian.Uint64(key[2:10]) ^ (1 << 63))
	n, k := binary.Uvarint(key[10:])
	if k <= 0 || uint64(len(key)-10-k) < n {
		return fmt.Errorf("time record key: bad join key length")
	}
	r.Key = key[10+k : 10+k+int(n)]
	r.PK = key[10+k+int(n):]
	if len(value) < 14 {
		return fmt.Errorf("time record value too short (%d bytes)", len(value))
	}
	r.Op, r.KeyNull = timejoin.Op(value[0]), value[1]&1 != 0
	if r.Op < timejoin.Insert || r.Op > timejoin.Truncate {
		return fmt.Errorf("time record with op %d", value[0])
	}
	r.Partition = int32(binary.BigEndian.Uint32(value[2:]))
	m.Source.Partition, m.Source.Offset = r.Partition, int64(binary.BigEndian.Uint64(value[6:]))
	kl, k2 := binary.Uvarint(value[14:])
	if k2 <= 0 || uint64(len(value)-14-k2) < kl {
		return fmt.Errorf("time record value: bad source key length")
	}
	m.Source.Key = value[14+k2 : 14+k2+int(kl)]
	rest := value[14+k2+int(kl):]
	r.Row = r.Row[:0]
	if r.Op == timejoin.Insert {
		var err error
		if r.Row, err = row.DecodeRow(r.Row, rest); err != nil {
			return fmt.Errorf("time record row: %w", err)
		}
	} else {
		r.Key, r.KeyNull = nil, false
	}
	return nil
}

func decodeWatermark(key, value []byte, m *Msg) error {
	if len(key) < 6 || len(value) != 9 {
		return fmt.Errorf("watermark record of %d/%d bytes", len(key), len(value))
	}
	w := &m.Watermark
	w.Source = timejoin.Source{Side: timejoin.Side(key[1]), Partition: int32(binary.BigEndian.Uint32(key[2:6]))}
	if w.Source.Side != timejoin.SideLeft && w.Source.Side != timejoin.SideRight {
		return fmt.Errorf("watermark record of side %q", key[1])
	}
	w.Max = int64(binary.BigEndian.Uint64(value) ^ (1 << 63))
	w.Idle = value[8] == 1
	return nil
}
