package kafkarun

import (
	"maps"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcjoin/cdcjoin/driver"
)

// Changelog marks: every keying transaction commits, with each source
// partition's offset, the end of that partition's index changelog as of
// the transaction (in the offset's metadata), and a restore reads the
// changelog at least that far (readPartition's mark). KIP-447 makes a new
// owner wait until the previous owner's transaction is decided before it
// fetches the committed offsets, but Kafka writes the commit markers of the
// group's offsets and of the changelog separately, so the offsets can be
// fetched while the changelog's last stable offset still stands before the
// transaction's records; a restore to that last stable offset alone would
// leave the index behind the offsets it is used from (stale rows: wrong
// TOAST completions, retractions sent to the wrong key).

// markPrefix starts the metadata of a committed source offset that carries
// a changelog mark.
const markPrefix = "cdcjoin.changelog="

// encodeMark is the offset metadata of changelog end n.
func encodeMark(n int64) string { return markPrefix + strconv.FormatInt(n, 10) }

// decodeMark returns the changelog end in offset metadata m (false: none,
// e.g. offsets committed before marks existed, or by another tool).
func decodeMark(m *string) (int64, bool) {
	if m == nil || !strings.HasPrefix(*m, markPrefix) {
		return 0, false
	}
	n, err := strconv.ParseInt((*m)[len(markPrefix):], 10, 64)
	return n, err == nil && n >= 0
}

// committedMarks returns, for the source partitions with a local index,
// the changelog end that index was committed at (what a transaction that
// writes nothing to a partition's changelog carries forward: franz-go
// commits the offsets of every partition consumed, not only of those the
// transaction read). Called before End, on the stage's goroutine.
func (k *keying) committedMarks() map[sourcePart]int64 {
	k.mu.Lock()
	stores := maps.Clone(k.idx)
	k.mu.Unlock()
	out := map[sourcePart]int64{}
	for sp, s := range stores {
		if n, ok, err := driver.MetaChangelog.Get(s); err == nil && ok {
			out[sp] = n
		}
	}
	return out
}

// markOf returns the changelog mark the group's committed offset of sp
// carried when it was fetched (-1: none).
func (k *keying) markOf(sp sourcePart) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n, ok := k.rd.marks[sp]; ok {
		return n
	}
	return -1
}

// markOffsets sets the changelog mark of every source partition in req
// (the transaction's offset commit, built by franz-go after its flush:
// every changelog record's offset is known by then): the changelog end
// after this transaction's records (logged), else carried (the end it was
// at). It runs under franz-go's transaction lock: no blocking, no client
// calls.
func (kt *keyingTxn) markOffsets(req *kmsg.TxnOffsetCommitRequest, carried map[sourcePart]int64) {
	kt.mu.Lock()
	defer kt.mu.Unlock()
	for i := range req.Topics {
		t := &req.Topics[i]
		side := kt.k.sideOf(t.Topic)
		if side == 0 {
			continue
		}
		for j := range t.Partitions {
			sp := sourcePart{side, t.Partitions[j].Partition}
			n, ok := kt.logged[sp]
			if !ok {
				n, ok = carried[sp]
			}
			if ok {
				m := encodeMark(n)
				t.Partitions[j].Metadata = &m
			}
		}
	}
}
