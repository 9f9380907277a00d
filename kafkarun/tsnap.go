package kafkarun

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/version"
)

// Operator-state snapshots of a time join (the topic "<group>.tsnap").
//
// A time join's keyed log is not a changelog (timejoin.go), so without
// more a partition that moves is rebuilt from its whole log, which grows
// forever. With kafka.snapshot_records not -1, each join worker, at the
// first commit after kafka.snapshot_records keyed records (or
// kafka.snapshot_interval with any record) since its last snapshot, reads
// its committed state in a fresh transaction right after the commit — the
// whole Aux keyspace (the operator's rows, timers, watermarks and seq
// counter: timeop), the position and the version clock: exactly the state
// at one committed position — and hands the image to its snapshot
// goroutine (owned by the worker, stopped and waited for when the worker
// stops; one image at a time: a due snapshot while one is being written
// waits for the next commit). That goroutine writes it to partition p of
// the snapshot topic (one partition per keyed partition; cleanup.policy
// delete, no retention limit: trimmed explicitly) as chunk records
// ('C' + position + nonce + index; a chunk's value is the entries, each
// uvarint-length-prefixed key and value, about snapshotChunk bytes) and
// then one end record ('M': position, nonce, chunk count, entry count,
// bytes, a CRC-32C over the chunks in order, the clock, the keyed topic's
// id and the first chunk's offset), each produced synchronously (acks
// from every in-sync replica). Only an end record whose chunks are all
// there, in order, with the right count and checksum, makes a snapshot
// COMPLETE; a writer stopped or killed between chunks leaves chunks no end
// record names, and readers ignore them.
//
// Once a snapshot is complete the goroutine trims: the keyed partition's
// records below min(snapshot position, the group's offset committed by
// this instance) are deleted (DeleteRecords) — again whenever that
// committed offset moves (joinStage.commit asks) — and so are the snapshot
// partition's records below the new snapshot's first chunk (older
// snapshots, stray chunks). So both topics stay bounded by the state, not
// the history: the keyed partition keeps about snapshot_records plus what
// the committed offset lags, the snapshot partition one or two snapshots.
// (A compacted topic would need the broker's cleaner to bound it, at its
// pace; explicit trimming is deterministic and the same on every broker.)
// Write and trim errors are logged and counted (cdcjoin_errors_total
// {stage="join",kind="snapshot"}); the next snapshot tries again; the join
// goes on either way.
//
// A worker that starts on a keyed partition (joinStage.startWorker) first
// asks for the partition's log start. Without local state and with
// committed input (or a trimmed log), or with local state below the log
// start (a stale disk: those records are gone), it loads the newest
// complete snapshot of the keyed topic it runs on (same topic id) whose
// position is at or above the log start: the Aux keyspace replaced by the
// snapshot's, the position and the clock, in one atomic commit; it then
// applies the log from the snapshot's position up to the committed offset
// without emitting, as before. No snapshot and a log that starts at 0:
// the log from the start, as before. A log start above every usable
// snapshot is an error naming the partition, the log start and the
// snapshot topic: nothing is skipped silently.

// snapshotChunk is about the most entry bytes a chunk record holds (an
// entry larger than it has a chunk of its own); well below the brokers'
// default max.message.bytes (1 MiB).
const snapshotChunk = 256 << 10

const (
	snapChunkKey = 'C'
	snapEndKey   = 'M'
	snapMagic    = "tsnap1"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapImage is one keyed partition's committed state at a position, as
// chunks ready to produce.
type snapImage struct {
	pos     int64
	clock   version.Clock
	keyedID string
	chunks  [][]byte
	entries int64
	bytes   int64
	crc     uint32
}

// snapEnd is a snapshot's end record.
type snapEnd struct {
	pos        int64
	nonce      uint64
	chunks     uint32
	entries    int64
	bytes      int64
	crc        uint32
	clock      []byte
	keyedID    string
	firstChunk int64 // offset of its first chunk in the snapshot partition
}

func (e *snapEnd) encode() []byte {
	b := append([]byte(nil), snapMagic...)
	b = binary.BigEndian.AppendUint64(b, uint64(e.pos))
	b = binary.BigEndian.AppendUint64(b, e.nonce)
	b = binary.BigEndian.AppendUint32(b, e.chunks)
	b = binary.BigEndian.AppendUint64(b, uint64(e.entries))
	b = binary.BigEndian.AppendUint64(b, uint64(e.bytes))
	b = binary.BigEndian.AppendUint32(b, e.crc)
	b = binary.BigEndian.AppendUint64(b, uint64(e.firstChunk))
	b = binary.AppendUvarint(b, uint64(len(e.clock)))
	b = append(b, e.clock...)
	b = binary.AppendUvarint(b, uint64(len(e.keyedID)))
	return append(b, e.keyedID...)
}

var errSnapEnd = errors.New("cdcjoin: snapshot end record: malformed")

func decodeSnapEnd(b []byte) (*snapEnd, error) {
	if !bytes.HasPrefix(b, []byte(snapMagic)) || len(b) < len(snapMagic)+48 {
		return nil, errSnapEnd
	}
	b = b[len(snapMagic):]
	e := &snapEnd{
		pos: int64(binary.BigEndian.Uint64(b)), nonce: binary.BigEndian.Uint64(b[8:]), chunks: binary.BigEndian.Uint32(b[16:]),
		entries: int64(binary.BigEndian.Uint64(b[20:])), bytes: int64(binary.BigEndian.Uint64(b[28:])), crc: binary.BigEndian.Uint32(b[36:]),
		firstChunk: int64(binary.BigEndian.Uint64(b[40:])),
	}
	b = b[48:]
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return nil, errSnapEnd
	}
	e.clock, b = append([]byte(nil), b[k:k+int(n)]...), b[k+int(n):]
	n, k = binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) != n {
		return nil, errSnapEnd
	}
	e.keyedID = string(b[k:])
	return e, nil
}

func snapChunkRecordKey(pos int64, nonce uint64, i uint32) []byte {
	k := []byte{snapChunkKey}
	k = binary.BigEndian.AppendUint64(k, uint64(pos))
	k = binary.BigEndian.AppendUint64(k, nonce)
	return binary.BigEndian.AppendUint32(k, i)
}

// captureSnapshot reads the committed state of the worker's store (call
// right after a commit, on the worker's goroutine).
func (w *worker) captureSnapshot() (*snapImage, error) {
	t := w.store.Begin()
	defer t.Abort()
	return captureState(t, w.j.topic, w.p, uint64(w.j.cfg.Kafka.Epoch), w.j.def.id, snapshotChunk)
}

// captureState reads what t sees of keyed partition topic/p: every Aux
// entry, the position and the clock, in chunks of about chunk bytes (nil
// without a position).
func captureState(t *joinstate.Txn, topic string, p int32, legacyEpoch uint64, keyedID string, chunk int) (*snapImage, error) {
	pos, ok, err := t.Position(topic, p)
	if err != nil || !ok {
		return nil, err
	}
	clock, err := driver.ReadClock(t, legacyEpoch)
	if err != nil {
		return nil, err
	}
	img := &snapImage{pos: pos, clock: clock, keyedID: keyedID}
	var cur []byte
	err = t.AuxScan(nil, nil, func(k, v []byte) error {
		if len(cur) > 0 && len(cur)+len(k)+len(v)+20 > chunk {
			img.chunks = append(img.chunks, cur)
			cur = nil
		}
		cur = binary.AppendUvarint(cur, uint64(len(k)))
		cur = append(cur, k...)
		cur = binary.AppendUvarint(cur, uint64(len(v)))
		cur = append(cur, v...)
		img.entries++
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(cur) > 0 {
		img.chunks = append(img.chunks, cur)
	}
	h := crc32.New(castagnoli)
	for _, c := range img.chunks {
		h.Write(c)
		img.bytes += int64(len(c))
	}
	img.crc = h.Sum32()
	return img, nil
}

// snapshotter is a worker's snapshot goroutine (see the top of this
// file): it writes the images the worker hands it, one at a time, and
// trims. Owned by the worker: started with it (joinStage.startWorker),
// stopped and waited for by stop when its run ends.
type snapshotter struct {
	w      *worker
	in     chan *snapImage // cap 1: the worker never waits for it
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	trim chan struct{} // cap 1: joinStage.commit moved the committed offset

	// Of the worker's goroutine: records applied since the last image
	// handed over, and when that was.
	since int64
	last  time.Time
	// Of the snapshot goroutine: the position of the newest complete
	// snapshot it wrote (0: none yet), and how far it trimmed.
	newest, trimmed int64
}

func (w *worker) startSnapshots() {
	j := w.j
	if !j.cfg.IsTimeJoin() || j.cfg.Kafka.SnapshotRecords < 0 || j.snapCl == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &snapshotter{w: w, in: make(chan *snapImage, 1), trim: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{}), last: time.Now()}
	w.snap = s
	go s.run()
}

// stop abandons the image being written (the next owner uses the last
// complete snapshot) and waits for the goroutine.
func (s *snapshotter) stop() {
	if s == nil {
		return
	}
	s.cancel()
	close(s.in)
	<-s.done
}

// committed is called on the worker's goroutine after each committed
// batch of applied records: a snapshot is captured and handed over when
// due and the goroutine is free.
func (s *snapshotter) committed(applied int) {
	if s == nil || applied == 0 && s.since == 0 {
		return
	}
	s.since += int64(applied)
	kc := &s.w.j.cfg.Kafka
	if s.since < int64(kc.SnapshotRecords) && time.Since(s.last) < kc.SnapshotInterval {
		return
	}
	if len(s.in) > 0 {
		return // the previous one is still waiting: the next commit tries again
	}
	img, err := s.w.captureSnapshot()
	if err != nil || img == nil {
		s.failed("capture", err)
		return
	}
	select {
	case s.in <- img:
		s.since, s.last = 0, time.Now()
	default:
	}
}

func (s *snapshotter) run() {
	defer close(s.done)
	for {
		select {
		case img, ok := <-s.in:
			if !ok {
				return
			}
			if s.ctx.Err() != nil {
				continue
			}
			if err := s.write(img); err != nil {
				s.failed("write", err)
			}
		case <-s.trim:
			if s.ctx.Err() != nil || s.newest <= 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(s.ctx, adminTimeout)
			err := s.trimKeyed(ctx)
			cancel()
			if err != nil {
				s.failed("trim", err)
			}
		}
	}
}

func (s *snapshotter) failed(what string, err error) {
	if err == nil {
		return
	}
	j := s.w.j
	j.m.Errors.WithLabelValues("join", "snapshot").Inc()
	j.log.Warn("time-join snapshot: "+what+" failed (the next one tries again)", "partition", s.w.p, "err", err)
}

// write produces img's chunks and end record to the snapshot partition and
// trims both topics below it.
func (s *snapshotter) write(img *snapImage) error {
	j, p := s.w.j, s.w.p
	topic := j.cfg.Kafka.SnapshotTopic()
	ctx, cancel := context.WithTimeout(s.ctx, adminTimeout)
	defer cancel()
	nonce := rand.Uint64()
	end := img.end(nonce)
	for i, c := range img.chunks {
		r := &kgo.Record{Topic: topic, Partition: p, Key: snapChunkRecordKey(img.pos, nonce, uint32(i)), Value: c}
		if err := j.snapCl.ProduceSync(ctx, r).FirstErr(); err != nil {
			return fmt.Errorf("cdcjoin: snapshot of %s/%d at %d: chunk %d: %w", j.topic, p, img.pos, i, err)
		}
		if i == 0 {
			end.firstChunk = r.Offset
		}
	}
	er := &kgo.Record{Topic: topic, Partition: p, Key: []byte{snapEndKey}, Value: end.encode()}
	if err := j.snapCl.ProduceSync(ctx, er).FirstErr(); err != nil {
		return fmt.Errorf("cdcjoin: snapshot of %s/%d at %d: end record: %w", j.topic, p, img.pos, err)
	}
	if end.firstChunk < 0 {
		end.firstChunk = er.Offset
	}
	if j.tm != nil {
		part := strconv.Itoa(int(p))
		j.tm.SnapshotBytes.WithLabelValues(part).Set(float64(img.bytes))
		j.tm.SnapshotOffset.WithLabelValues(part).Set(float64(img.pos))
	}
	j.log.Debug("time-join snapshot written", "first_chunk", end.firstChunk, "partition", p, "position", img.pos, "entries", img.entries, "bytes", img.bytes, "chunks", len(img.chunks))
	s.newest = img.pos
	if err := s.trimKeyed(ctx); err != nil {
		return err
	}
	return deleteBelow(ctx, kadm.NewClient(j.snapCl), topic, p, end.firstChunk)
}

// trimKeyed deletes the keyed partition's records below the newest
// complete snapshot this goroutine wrote, never past the group's offset
// committed by this instance (which lags the snapshots: joinStage.commit
// asks again, requestTrim, when it moves).
func (s *snapshotter) trimKeyed(ctx context.Context) error {
	j, p := s.w.j, s.w.p
	j.mu.Lock()
	committed, owned := j.committed[p]
	j.mu.Unlock()
	to := min(s.newest, committed)
	if !owned || to <= s.trimmed {
		return nil
	}
	if err := deleteBelow(ctx, kadm.NewClient(j.snapCl), j.topic, p, to); err != nil {
		return err
	}
	s.trimmed = to
	return nil
}

// requestTrim asks the goroutine to trim the keyed partition again (the
// group's committed offset moved). Safe on any goroutine; never blocks.
func (s *snapshotter) requestTrim() {
	if s == nil {
		return
	}
	select {
	case s.trim <- struct{}{}:
	default:
	}
}

// deleteBelow deletes topic/p's records below offset to.
func deleteBelow(ctx context.Context, adm *kadm.Client, topic string, p int32, to int64) error {
	o := kadm.Offsets{}
	o.Add(kadm.Offset{Topic: topic, Partition: p, At: to, LeaderEpoch: -1})
	rs, err := adm.DeleteRecords(ctx, o)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		return fmt.Errorf("cdcjoin: trim %s/%d below %d: %w", topic, p, to, err)
	}
	return nil
}

// end returns img's end record with nonce (firstChunk unknown: -1).
func (img *snapImage) end(nonce uint64) *snapEnd {
	e := &snapEnd{pos: img.pos, nonce: nonce, chunks: uint32(len(img.chunks)), entries: img.entries, bytes: img.bytes, crc: img.crc,
		keyedID: img.keyedID, firstChunk: -1}
	e.clock, _ = img.clock.MarshalBinary()
	return e
}

// snapLoaded is a complete snapshot read back.
type snapLoaded struct {
	end     *snapEnd
	entries [][2][]byte
}

// readSnapshot returns the newest complete snapshot of keyed partition p
// of the keyed topic with id keyedID (nil: none), reading the snapshot
// partition from its start to its end.
func (j *joinStage) readSnapshot(ctx context.Context, p int32) (*snapLoaded, error) {
	topic := j.cfg.Kafka.SnapshotTopic()
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	adm := kadm.NewClient(j.snapCl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, kafkaFault(fmt.Errorf("cdcjoin: snapshot topic %s: list offsets: %w", topic, err))
	}
	endOff, ok := ends.Lookup(topic, p)
	if !ok {
		return nil, fmt.Errorf("cdcjoin: snapshot topic %s has no partition %d (it needs one per keyed partition)", topic, p)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, kafkaFault(fmt.Errorf("cdcjoin: snapshot topic %s: list offsets: %w", topic, err))
	}
	startOff, _ := starts.Lookup(topic, p)
	if endOff.Offset <= startOff.Offset {
		return nil, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), j.base...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(startOff.Offset)}}))...)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: snapshot topic %s: client: %w", topic, err)
	}
	defer cl.Close()
	type rec struct {
		off        int64
		key, value []byte
	}
	var recs []rec
	next := startOff.Offset
	for next < endOff.Offset {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, kafkaFault(fmt.Errorf("cdcjoin: reading snapshot partition %s/%d (%d..%d, at %d): %w", topic, p, startOff.Offset, endOff.Offset, next, ctx.Err()))
		}
		if err := fs.Err(); err != nil {
			return nil, kafkaFault(fmt.Errorf("cdcjoin: reading snapshot partition %s/%d: %w", topic, p, err))
		}
		fs.EachRecord(func(r *kgo.Record) {
			recs = append(recs, rec{r.Offset, r.Key, r.Value})
			next = max(next, r.Offset+1)
		})
	}
	j.log.Debug("snapshot partition read", "partition", p, "start", startOff.Offset, "end", endOff.Offset, "records", len(recs))
	// The newest end record whose chunks are all there, in order.
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if len(r.key) != 1 || r.key[0] != snapEndKey {
			continue
		}
		e, err := decodeSnapEnd(r.value)
		if err != nil {
			j.log.Warn("snapshot topic: a malformed end record (ignored)", "partition", p, "offset", r.off, "err", err)
			continue
		}
		if e.keyedID != j.def.id {
			j.log.Warn("snapshot topic: a snapshot of another keyed topic (ignored)", "partition", p, "offset", r.off, "its_keyed_topic_id", e.keyedID, "keyed_topic_id", j.def.id)
			continue
		}
		var chunks [][]byte
		for _, c := range recs[:i] {
			if c.off >= e.firstChunk && bytes.Equal(c.key, snapChunkRecordKey(e.pos, e.nonce, uint32(len(chunks)))) {
				chunks = append(chunks, c.value)
			}
		}
		l, err := decodeSnapshot(e, chunks)
		if err != nil {
			j.log.Warn("snapshot topic: an incomplete snapshot (ignored)", "partition", p, "offset", r.off, "position", e.pos, "err", err)
			continue
		}
		return l, nil
	}
	return nil, nil
}

// decodeSnapshot checks a snapshot's chunks against its end record and
// decodes its entries.
func decodeSnapshot(e *snapEnd, chunks [][]byte) (*snapLoaded, error) {
	if uint32(len(chunks)) != e.chunks {
		return nil, fmt.Errorf("%d of %d chunks", len(chunks), e.chunks)
	}
	h := crc32.New(castagnoli)
	var n int64
	l := &snapLoaded{end: e}
	for _, c := range chunks {
		h.Write(c)
		n += int64(len(c))
		for len(c) > 0 {
			var kv [2][]byte
			for i := range kv {
				m, k := binary.Uvarint(c)
				if k <= 0 || uint64(len(c)-k) < m {
					return nil, errors.New("a chunk's entries are malformed")
				}
				kv[i], c = c[k:k+int(m)], c[k+int(m):]
			}
			l.entries = append(l.entries, kv)
		}
	}
	if n != e.bytes || h.Sum32() != e.crc || int64(len(l.entries)) != e.entries {
		return nil, fmt.Errorf("chunks of %d bytes, %d entries, checksum %08x; the end record says %d, %d, %08x", n, len(l.entries), h.Sum32(), e.bytes, e.entries, e.crc)
	}
	return l, nil
}

// installSnapshot replaces the state of keyed partition topic/p in t by
// l: the Aux keyspace, the position and the clock (committed by the
// caller, in one step).
func installSnapshot(t *joinstate.Txn, topic string, p int32, l *snapLoaded) (version.Clock, error) {
	var c version.Clock
	if err := c.UnmarshalBinary(l.end.clock); err != nil {
		return c, fmt.Errorf("cdcjoin: snapshot of %s/%d at %d: clock: %w", topic, p, l.end.pos, err)
	}
	var old [][]byte
	if err := t.AuxScan(nil, nil, func(k, _ []byte) error {
		old = append(old, append([]byte(nil), k...))
		return nil
	}); err != nil {
		return c, err
	}
	for _, k := range old {
		if err := t.DeleteAux(k); err != nil {
			return c, err
		}
	}
	for _, kv := range l.entries {
		if err := t.PutAux(kv[0], kv[1]); err != nil {
			return c, err
		}
	}
	if err := t.SetPosition(topic, p, l.end.pos); err != nil {
		return c, err
	}
	return c, driver.MetaClock.Put(t, c)
}

// snapshotStart decides, for a time join's keyed partition p about to
// start on a store whose position is pos (has: any), whether it starts
// from a snapshot (see the top of this file), and installs it in st
// (committed). It returns the position it starts from and whether it did.
func (j *joinStage) snapshotStart(st *joinstate.Store, p int32, committed, pos int64, has bool) (int64, bool, error) {
	ctx := context.Background()
	lctx, cancel := context.WithTimeout(ctx, adminTimeout)
	starts, err := kadm.NewClient(j.snapCl).ListStartOffsets(lctx, j.topic)
	cancel()
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, false, kafkaFault(fmt.Errorf("cdcjoin: join partition %d: log start: %w", p, err))
	}
	o, _ := starts.Lookup(j.topic, p)
	logStart := o.Offset
	switch {
	case has && pos >= logStart:
		return 0, false, nil // the local state is current with the log
	case !has && committed <= 0 && logStart <= 0:
		return 0, false, nil // nothing to rebuild
	}
	began := time.Now()
	l, err := j.readSnapshot(ctx, p)
	if err != nil {
		return 0, false, err
	}
	if l == nil || l.end.pos < logStart {
		if logStart <= 0 {
			return 0, false, nil // the whole log is there: rebuild from it
		}
		at := "none"
		if l != nil {
			at = "the newest is at " + strconv.FormatInt(l.end.pos, 10)
		}
		local := "no local state"
		if has {
			local = "local state at " + strconv.FormatInt(pos, 10)
		}
		return 0, false, fmt.Errorf("cdcjoin: join partition %d: the keyed log %s/%d starts at %d (trimmed after snapshots), %s, and no complete snapshot in %s covers it (%s): the partition cannot be rebuilt; reset the job",
			p, j.topic, p, logStart, local, j.cfg.Kafka.SnapshotTopic(), at)
	}
	t := st.Begin()
	_, err = installSnapshot(t, j.topic, p, l)
	if err == nil {
		err = t.Commit()
	} else {
		t.Abort()
	}
	if err != nil {
		return 0, false, fmt.Errorf("cdcjoin: join partition %d: installing the snapshot at %d: %w", p, l.end.pos, err)
	}
	if j.tm != nil {
		j.tm.SnapshotLoads.Inc()
	}
	j.log.Info("partition loaded from a snapshot", "partition", p, "position", l.end.pos, "entries", l.end.entries, "bytes", l.end.bytes,
		"log_start", logStart, "committed", committed, "local", pos, "had_state", has, "seconds", time.Since(began).Seconds())
	return l.end.pos, true, nil
}

// checkTrimmed guards a time join's worker against a keyed log trimmed
// under it (by another instance's snapshot goroutine, say a previous
// owner that had not noticed it lost the partition): when the records
// handed over start past the worker's position, it asks for the log start
// and, if that is past the position too — the consumer was reset to the
// log start, and the records between were never applied — fails
// restartably, so that the partition's worker starts again from its
// state, which is then below the log start, and loads a snapshot. A gap
// with the log start at or below the position is an aborted transaction's
// records (read_committed skips them) and is fine.
func (w *worker) checkTrimmed(recs []*kgo.Record) error {
	j := w.j
	expect := max(w.pos.Load(), 0)
	if j.snapCl == nil || len(recs) == 0 || recs[0].Offset <= expect {
		return nil
	}
	ctx, cancel := context.WithTimeout(w.ctx, adminTimeout)
	defer cancel()
	starts, err := kadm.NewClient(j.snapCl).ListStartOffsets(ctx, j.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return kafkaFault(fmt.Errorf("cdcjoin: join partition %d: log start: %w", w.p, err))
	}
	if o, _ := starts.Lookup(j.topic, w.p); o.Offset > expect {
		return &restartable{fmt.Errorf("cdcjoin: join partition %d: the keyed log %s/%d starts at %d, past this worker's position %d (trimmed before it read the records between): restarting the partition from a snapshot",
			w.p, j.topic, w.p, o.Offset, expect)}
	}
	return nil
}
