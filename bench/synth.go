package bench

import (
	"strconv"

	"github.com/cdcjoin/cdcjoin/cdcgen"
)

// Synthetic rows live in id ranges cdcgen never reaches (cdcgen ids start
// at 1 above IDBase = producer<<40, producers < 32).
const (
	hotUserID   = int64(1) << 45 // the storm's hot parent
	hotChildID0 = hotUserID + 1  // its children: hotChildID0 + i
	probeUserID = int64(1) << 46 // parent of every probe child
	probeChild0 = probeUserID + 1
)

// synth encodes the harness's own records in the shape of cdcgen's
// schemaless Debezium envelopes (the columns the benchmark join selects,
// plus a realistic source block). Not safe for concurrent use.
type synth struct {
	parentTopic, childTopic string
	buf                     []byte
}

func newSynth() *synth {
	return &synth{parentTopic: cdcgen.DefaultParentTopic, childTopic: cdcgen.DefaultChildTopic}
}

func appendKey(b []byte, id int64) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, id, 10)
	return append(b, '}')
}

func appendSource(b []byte, table string, tsMs int64, snapshot string) []byte {
	b = append(b, `"source":{"version":"3.6.1.Final","connector":"postgresql","name":"dbserver1","ts_ms":`...)
	b = strconv.AppendInt(b, tsMs, 10)
	b = append(b, `,"snapshot":"`...)
	b = append(b, snapshot...)
	b = append(b, `","db":"shop","sequence":null,"schema":"public","table":"`...)
	b = append(b, table...)
	b = append(b, `","txId":1,"lsn":1,"xmin":null},"transaction":null,"op":"`...)
	return b
}

// user returns the key and value of a users event (op 'r', 'c' or 'u').
// The slices are valid until the next call.
func (s *synth) user(op byte, id int64, first, last string, tsMs int64) (key, val []byte) {
	b := s.buf[:0]
	b = appendKey(b, id)
	k := len(b)
	b = append(b, `{"before":null,"after":{"id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"firstname":"`...)
	b = append(b, first...)
	b = append(b, `","lastname":"`...)
	b = append(b, last...)
	b = append(b, `","email":"hot@example.com"},`...)
	return s.finish(b, k, "users", op, tsMs)
}

// domain returns the key and value of a domains event (op 'r' or 'c').
func (s *synth) domain(op byte, id, userID int64, name string, tsMs int64) (key, val []byte) {
	b := s.buf[:0]
	b = appendKey(b, id)
	k := len(b)
	b = append(b, `{"before":null,"after":{"id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"user_id":`...)
	b = strconv.AppendInt(b, userID, 10)
	b = append(b, `,"domain_name":"`...)
	b = append(b, name...)
	b = append(b, `"},`...)
	return s.finish(b, k, "domains", op, tsMs)
}

// finish appends the source block, op and ts_ms, keeps the buffer, and
// splits it into key (the first k bytes) and value.
func (s *synth) finish(b []byte, k int, table string, op byte, tsMs int64) (key, val []byte) {
	b = appendSource(b, table, tsMs, snapFlag(op))
	b = append(b, op, '"')
	b = append(b, `,"ts_ms":`...)
	b = strconv.AppendInt(b, tsMs, 10)
	b = append(b, '}')
	s.buf = b
	return b[:k:k], b[k:]
}

func snapFlag(op byte) string {
	if op == 'r' {
		return "true"
	}
	return "false"
}

// hotChildName is the domain name of hot child i.
func hotChildName(i int64) string { return "hot-" + strconv.FormatInt(i, 10) + ".example.com" }

// stormName is the hot parent's first name after rename n.
func stormName(n int) string { return "Storm" + strconv.Itoa(n) }
