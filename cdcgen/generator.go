package cdcgen

import (
	"math/rand/v2"
)

// Record is one Kafka record as a consumer sees it.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64  // consecutive per (Topic, Partition), starting at 0
	Key       []byte // nil for a truncate event
	Value     []byte // nil for a tombstone
	// Metadata for tests and benchmarks (not part of the Kafka record):
	//
	// Op is the Debezium op ('c', 'u', 'd', 'r', 't'), or 0 for a tombstone.
	Op byte
	// Dup marks a re-sent copy (connector restart or snapshot rerun).
	Dup bool
	// TsMs is the envelope's ts_ms (Debezium processing time); use it as the
	// Kafka record timestamp. For tombstones, the delete's.
	TsMs int64
	// Checkpoint is true when, after consuming this record (and everything
	// before it in consumption order), every partition has been consumed up
	// to the same DB time: the records so far describe exactly one DB state.
	Checkpoint bool
}

type opKind uint8

const (
	opInsertUser opKind = iota
	opInsertDomain
	opUpdateUserSel
	opUpdateUserUnsel
	opUpdateDomain
	opMoveDomain
	opDeleteUser
	opDeleteDomain
	opPKUser
	opPKDomain
	opTruncUsers
	opTruncDomains
	opRecreateUser
	opOrphanDomain
	numOpKinds
)

// Stats counts what a history contains, per hard case. All counts are of
// records or operations actually emitted.
type Stats struct {
	Records           int // all records, duplicates included
	SnapshotRecords   int // op=r, first run
	SnapshotReruns    int // op=r records re-sent by a snapshot rerun
	Ops               [numOpKinds]int
	Inserts           int // op=c records
	Updates           int // op=u records
	Deletes           int // op=d records
	Tombstones        int
	Truncates         int // op=t records
	BeforeNull        int // updates with before=null (REPLICA IDENTITY DEFAULT)
	BeforeKeyOnly     int // deletes whose before has only the key
	ToastedColumns    int // columns sent as __debezium_unavailable_value
	ToastedProjected  int // …of which firstname, lastname or domain_name
	Redeliveries      int // connector restarts
	Redelivered       int // records re-sent by them
	PKChangeCross     int // PK changes whose delete and create are on different partitions
	FKMovesNoBefore   int // FK moves sent without a before image
	ChildBeforeParent int // users created after a domain already referenced them
	OrphanedChildren  int // domains left referencing a deleted user (at the user's delete)
	LSNBackwards      int // events whose lsn is lower than an earlier event's
	MultiOpTx         int // transactions with more than one operation
	SchemaOnRecords   int
	SchemaOffRecords  int
	Checkpoints       int
}

// Op returns how many operations of the Mix field's kind ran; name is the
// Mix field name (e.g. "PKChangeUser"); unknown names give -1.
func (s *Stats) Op(name string) int {
	k, ok := opNames[name]
	if !ok {
		return -1
	}
	return s.Ops[k]
}

var opNames = map[string]opKind{
	"InsertUser": opInsertUser, "InsertDomain": opInsertDomain, "UpdateUserSelected": opUpdateUserSel,
	"UpdateUserUnselected": opUpdateUserUnsel, "UpdateDomain": opUpdateDomain, "MoveDomain": opMoveDomain,
	"DeleteUser": opDeleteUser, "DeleteDomain": opDeleteDomain, "PKChangeUser": opPKUser,
	"PKChangeDomain": opPKDomain, "TruncateUsers": opTruncUsers, "TruncateDomains": opTruncDomains,
	"RecreateUser": opRecreateUser, "OrphanDomain": opOrphanDomain,
}

// pending is a produced record of the current round, its bytes in the arena.
type pending struct {
	tp         int32 // table*partitions + partition
	kOff, kEnd int32 // kOff < 0: nil key
	vOff, vEnd int32 // vOff < 0: nil value
	op         byte
	dup        bool
	offset     int64
	tsMs       int64
	roundOp    int32 // index of the operation within its round
}

// Generator produces a history record by record, in consumption order,
// holding only the current round in memory (plus a few integers per row of
// DB state), so it can stream 10^8 records. It is not safe for concurrent
// use; run one Generator per goroutine (with different seeds, or the same
// seed for identical streams).
type Generator struct {
	o       Options
	rng     *rand.Rand
	tables  [2]*tableEnc // 0 users, 1 domains
	st      *state
	weights [numOpKinds]int
	wTotal  int
	nparts  int
	nextOff []int64 // per tp

	// current round
	arena   []byte
	recs    []pending
	queues  [][]int32 // per tp: indexes into recs, production order
	order   []int32   // consumption order
	next    int
	barrier bool // the round ends at a consistent DB state
	reuse   bool // arena and slices may be reused after the round

	// source positions
	snapLSN, lsnHigh, lastCommit, txID int64
	txFirstLSN, prevTxFirstLSN         int64
	curLSN, clockUs, procUs            int64
	txLeft, txOps                      int
	txPos                              pos

	phase     int // 0 snapshot, 1 streaming, 2 done
	snapNext  int // next snapshot row index (users then domains)
	opsDone   int
	roundOp   int32
	deferred  opKind // a truncate postponed to the start of the next round
	hasDefer  bool
	orphanPar map[int64]struct{} // user ids referenced before they existed
	toast     []bool
	zipf      *rand.Zipf
	zipfMax   uint64
	stats     Stats
	log       *[]mutation // ground-truth DB log (Generate only)
}

// NewGenerator validates opts and prepares a generator. Errors are
// prefixed "cdcjoin: cdcgen:".
func NewGenerator(opts Options) (*Generator, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	g := &Generator{
		o:         o,
		rng:       rand.New(rand.NewPCG(uint64(o.Seed), 0x63646367656e)),
		st:        newState(),
		weights:   o.Mix.weights(),
		nparts:    o.Partitions,
		nextOff:   make([]int64, 2*o.Partitions),
		queues:    make([][]int32, 2*o.Partitions),
		reuse:     true,
		orphanPar: map[int64]struct{}{},
	}
	for _, w := range g.weights {
		g.wTotal += w
	}
	pad := newPadText(o.PadBytes, g.rng.Uint64)
	g.tables[0] = newTableEnc(o.ParentTopic, "users", usersColumns(o.CreatedAt, o.UserPads), pad)
	g.tables[1] = newTableEnc(o.ChildTopic, "domains", domainsColumns(o.DomainPads), pad)
	g.tables[0].idBase, g.tables[1].idBase = o.IDBase, o.IDBase
	n := len(g.tables[0].cols)
	if m := len(g.tables[1].cols); m > n {
		n = m
	}
	g.toast = make([]bool, n)
	g.snapLSN = 23_000_000 + int64(g.rng.IntN(1_000_000))*8
	g.lsnHigh = g.snapLSN
	g.txID = 700 + int64(g.rng.IntN(1000))
	g.clockUs = createdBase + 6*365*86400*1_000_000 + int64(g.rng.IntN(1_000_000_000))
	g.procUs = g.clockUs
	return g, nil
}

// Stats returns the counts so far.
func (g *Generator) Stats() Stats { return g.stats }

// Tables renders the DB state after the last operation generated so far.
// It matches the consumed records only when the last record returned by Next
// had Checkpoint set. It allocates the whole state: for tests.
func (g *Generator) Tables() Tables { return g.st.tables(g.o.IDBase) }

// Next returns the next record in consumption order; ok is false when the
// history is complete. The record's Key and Value are only valid until the
// next call to Next (they point into a buffer that is reused): copy them to
// keep them.
func (g *Generator) Next() (rec Record, ok bool) {
	for g.next >= len(g.order) {
		if !g.buildRound() {
			return Record{}, false
		}
	}
	i := g.order[g.next]
	g.next++
	p := &g.recs[i]
	t := int(p.tp) / g.nparts
	rec = Record{
		Topic: g.tables[t].topic, Partition: int32(int(p.tp) % g.nparts), Offset: p.offset,
		Op: p.op, Dup: p.dup, TsMs: p.tsMs,
		Checkpoint: g.barrier && g.next == len(g.order),
	}
	if p.kOff >= 0 {
		rec.Key = g.arena[p.kOff:p.kEnd:p.kEnd]
	}
	if p.vOff >= 0 {
		rec.Value = g.arena[p.vOff:p.vEnd:p.vEnd]
	}
	if rec.Checkpoint {
		g.stats.Checkpoints++
	}
	return rec, true
}

// resetRound starts a new, empty round.
func (g *Generator) resetRound() {
	if g.reuse {
		g.arena = g.arena[:0]
	} else {
		g.arena = make([]byte, 0, max(cap(g.arena), 1<<16))
	}
	g.recs = g.recs[:0]
	for i := range g.queues {
		g.queues[i] = g.queues[i][:0]
	}
	g.order = g.order[:0]
	g.next = 0
	g.roundOp = 0
	g.barrier = false
}

// buildRound produces the next round; false when the history is complete.
func (g *Generator) buildRound() bool {
	g.resetRound()
	switch g.phase {
	case 0:
		g.snapshotChunk()
	case 1:
		if g.opsDone >= g.o.Ops {
			g.phase = 2
			return false
		}
		g.streamRound()
	default:
		return false
	}
	g.interleave()
	return true
}

// snapshotRows are the initial rows: users 1..Users, domains 1..Domains.
func (g *Generator) snapshotChunk() {
	o := &g.o
	total := o.Users + o.Domains
	if g.snapNext == 0 {
		// Build the initial DB state.
		for id := int64(1); id <= int64(o.Users); id++ {
			g.st.putUser(id, 1, 1)
			g.logMut(mutation{kind: mutPutUser, id: id, a: 1, b: 1})
		}
		for id := int64(1); id <= int64(o.Domains); id++ {
			var u int64
			if o.Mix.OrphanDomain > 0 && g.rng.IntN(50) == 0 {
				u = g.st.nextUser + int64(g.rng.IntN(3))
				g.orphanPar[u] = struct{}{}
			} else {
				u = g.pickUser()
			}
			g.st.putDomain(id, 1, u)
			g.logMut(mutation{kind: mutPutDomain, id: id, a: 1, user: u})
		}
	}
	if total == 0 {
		g.phase = 1
		g.resetRound()
		g.streamRound()
		return
	}
	end := min(g.snapNext+o.SnapshotChunk, total)
	first := len(g.recs)
	for i := g.snapNext; i < end; i++ {
		t, id := 0, int64(i+1)
		if i >= o.Users {
			t, id = 1, int64(i-o.Users+1)
		}
		img := image{id: id, a: 1, b: 1}
		if t == 1 {
			img = image{id: id, a: 1, user: g.st.dUser[id]}
		}
		flag := "true"
		switch {
		case i == total-1:
			flag = "last"
		case i == 0:
			flag = "first"
		case i == o.Users:
			flag = "first_in_data_collection"
		case i == o.Users-1:
			flag = "last_in_data_collection"
		}
		p := pos{txID: g.txID, lsn: g.snapLSN, tsUs: g.clockUs, procUs: g.clockUs + int64(i), snapshot: flag}
		// Snapshot rows choose their schema mode by hash, not by the rng, so
		// that a rerun is byte-identical by construction.
		schemaOn := g.schemaFor(uint64(i))
		g.produce(t, 'r', id, nil, &img, nil, &p, schemaOn, false)
	}
	if g.snapNext == 0 && o.SnapshotRerun {
		// The first run failed after k records; they stay in Kafka and the
		// snapshot starts over. Re-enqueue: k originals, then the full chunk.
		k := 1 + g.rng.IntN(end-first)
		produced := append([]pending(nil), g.recs[first:]...)
		g.recs = g.recs[:first]
		for i := range g.queues {
			g.queues[i] = g.queues[i][:0]
		}
		for i := range produced {
			g.nextOff[produced[i].tp]--
		}
		g.stats.Records -= len(produced)
		for i := 0; i < k; i++ {
			g.enqueue(produced[i])
		}
		for i := range produced {
			p := produced[i]
			p.dup = i < k
			if p.dup {
				g.stats.SnapshotReruns++
			}
			g.enqueue(p)
		}
	}
	g.stats.SnapshotRecords += end - g.snapNext
	g.snapNext = end
	if end == total {
		g.phase = 1
		g.barrier = true
		g.clockUs += int64(total) + 1000
		g.procUs = max(g.procUs, g.clockUs+int64(total))
	}
}

func (g *Generator) schemaFor(h uint64) bool {
	switch g.o.SchemaMode {
	case SchemaOff:
		return false
	case SchemaMixed:
		return mix(uint64(g.o.Seed), h, 77)&1 == 0
	}
	return true
}

func (g *Generator) schemaRandom() bool {
	switch g.o.SchemaMode {
	case SchemaOff:
		return false
	case SchemaMixed:
		return g.rng.IntN(2) == 0
	}
	return true
}

// streamRound runs 1..MaxRoundOps operations. With more than one partition
// per topic, a truncate runs alone in its own round (its order against
// other partitions is undefined in Kafka, so a checkpoint must separate it
// from everything else).
func (g *Generator) streamRound() {
	n := 1 + g.rng.IntN(g.o.MaxRoundOps)
	n = min(n, g.o.Ops-g.opsDone)
	for i := 0; i < n; i++ {
		var k opKind
		if g.hasDefer {
			k, g.hasDefer = g.deferred, false
		} else {
			k = g.drawKind()
		}
		isTrunc := k == opTruncUsers || k == opTruncDomains
		if isTrunc && g.nparts > 1 && i > 0 {
			g.deferred, g.hasDefer = k, true
			break
		}
		if isTrunc {
			g.endTx()
		}
		g.beginOp()
		g.runOp(k)
		g.endOp()
		g.opsDone++
		g.roundOp++
		if isTrunc {
			g.endTx()
			if g.nparts > 1 {
				break
			}
		}
	}
	g.endTx()
	if g.roundOp > 0 && g.o.Redeliver > 0 && g.rng.Float64() < g.o.Redeliver {
		g.redeliver(int32(g.rng.IntN(int(g.roundOp))))
	}
	g.barrier = true
}

func (g *Generator) drawKind() opKind {
	x := g.rng.IntN(g.wTotal)
	for k, w := range g.weights {
		if x < w {
			return opKind(k)
		}
		x -= w
	}
	return opInsertUser
}

// beginOp opens a transaction if none is open and assigns the operation's LSN.
func (g *Generator) beginOp() {
	if g.txLeft == 0 {
		g.txID++
		g.txLeft = 1 + g.rng.IntN(g.o.MaxTxOps)
		g.txOps = 0
		g.clockUs += 1 + int64(g.rng.IntN(3000))
		// The first change follows the previous commit record (whose end
		// is source.sequence[0]), sometimes after unrelated WAL.
		base := g.lsnHigh + 8*int64(g.rng.IntN(2))
		if g.lastCommit == 0 {
			base += 96 // after the snapshot's position
		}
		if g.prevTxFirstLSN > g.snapLSN+64 && g.o.LSNInterleave > 0 && g.rng.Float64() < g.o.LSNInterleave {
			// Started before the previous transaction committed.
			base = g.prevTxFirstLSN - 8*int64(1+g.rng.IntN(4)) + 4
		}
		g.curLSN = base - 8
		g.txFirstLSN = base
		g.txPos = pos{txID: g.txID, lastCommit: g.lastCommit, tsUs: g.clockUs, snapshot: "false"}
	}
	g.curLSN += 8
	if g.curLSN < g.lsnHigh {
		g.stats.LSNBackwards++
	}
	g.lsnHigh = max(g.lsnHigh, g.curLSN)
	g.txPos.lsn = g.curLSN
	g.procUs = max(g.procUs+1, g.clockUs+int64(100+g.rng.IntN(50_000)))
	g.txPos.procUs = g.procUs
}

func (g *Generator) endOp() {
	g.txOps++
	g.txLeft--
	if g.txLeft == 0 {
		g.commit()
	}
}

// endTx commits an open transaction early (round end, truncate).
func (g *Generator) endTx() {
	if g.txLeft > 0 {
		g.txLeft = 0
		g.commit()
	}
}

func (g *Generator) commit() {
	if g.txOps > 1 {
		g.stats.MultiOpTx++
	}
	g.lsnHigh += 16
	g.lastCommit = g.lsnHigh
	g.prevTxFirstLSN = g.txFirstLSN
}

func (g *Generator) logMut(m mutation) {
	if g.log != nil {
		*g.log = append(*g.log, m)
	}
}

// pickUser returns a live user id (Zipf-skewed when configured), or 0.
func (g *Generator) pickUser() int64 {
	s := g.st
	if len(s.users.ids) == 0 {
		return 0
	}
	if g.o.ParentSkew > 1 {
		imax := uint64(s.nextUser)
		if g.zipf == nil || imax > g.zipfMax+g.zipfMax/10 {
			g.zipf = rand.NewZipf(g.rng, g.o.ParentSkew, 1, imax)
			g.zipfMax = imax
		}
		if id := int64(g.zipf.Uint64()) + 1; s.users.has(id) {
			return id
		}
	}
	return s.users.ids[g.rng.IntN(len(s.users.ids))]
}

func (g *Generator) pickDomain() int64 {
	if len(g.st.domains.ids) == 0 {
		return 0
	}
	return g.st.domains.ids[g.rng.IntN(len(g.st.domains.ids))]
}

// runOp applies one operation to the state and produces its records.
func (g *Generator) runOp(k opKind) {
	s := g.st
	switch k {
	case opUpdateUserSel, opUpdateUserUnsel, opDeleteUser, opPKUser:
		if len(s.users.ids) == 0 {
			k = opInsertUser
		}
	case opUpdateDomain, opMoveDomain, opDeleteDomain, opPKDomain:
		if len(s.domains.ids) == 0 {
			k = opInsertDomain
		}
	case opRecreateUser:
		for len(s.deletedUsers) > 0 && s.users.has(s.deletedUsers[len(s.deletedUsers)-1]) {
			s.deletedUsers = s.deletedUsers[:len(s.deletedUsers)-1]
		}
		if len(s.deletedUsers) == 0 {
			k = opInsertUser
		}
	}
	if k == opMoveDomain && len(s.users.ids) < 2 {
		k = opUpdateDomain
	}
	g.stats.Ops[k]++
	p := &g.txPos
	fullUsers := g.o.UsersIdentity == ReplicaFull
	fullDomains := g.o.DomainsIdentity == ReplicaFull
	switch k {
	case opInsertUser, opRecreateUser:
		var id int64
		if k == opRecreateUser {
			id = s.deletedUsers[len(s.deletedUsers)-1]
			s.deletedUsers = s.deletedUsers[:len(s.deletedUsers)-1]
		} else {
			id = s.nextUser
		}
		s.growUsers(id)
		if _, ok := g.orphanPar[id]; ok {
			delete(g.orphanPar, id)
			g.stats.ChildBeforeParent++
		}
		after := image{id: id, a: s.uSel[id] + 1, b: s.uUns[id] + 1}
		g.putUser(after)
		g.produce(0, 'c', id, nil, &after, nil, p, g.schemaRandom(), false)
	case opInsertDomain, opOrphanDomain:
		u := g.pickUser()
		if k == opOrphanDomain || u == 0 {
			u = s.nextUser + int64(g.rng.IntN(3))
			g.orphanPar[u] = struct{}{}
		}
		id := s.nextDomain
		s.growDomains(id)
		after := image{id: id, a: s.dVer[id] + 1, user: u}
		g.putDomain(after)
		g.produce(1, 'c', id, nil, &after, nil, p, g.schemaRandom(), false)
	case opUpdateUserSel, opUpdateUserUnsel:
		id := g.pickUser()
		before := image{id: id, a: s.uSel[id], b: s.uUns[id]}
		after := before
		if k == opUpdateUserSel {
			after.a++
		} else {
			after.b++
		}
		g.putUser(after)
		g.update(0, fullUsers, &before, &after)
	case opUpdateDomain, opMoveDomain:
		id := g.pickDomain()
		before := image{id: id, a: s.dVer[id], user: s.dUser[id]}
		after := before
		if k == opUpdateDomain {
			after.a++
		} else {
			for after.user == before.user {
				after.user = g.pickUser()
			}
			if !fullDomains {
				g.stats.FKMovesNoBefore++
			}
		}
		g.putDomain(after)
		g.update(1, fullDomains, &before, &after)
	case opDeleteUser:
		id := g.pickUser()
		before := image{id: id, a: s.uSel[id], b: s.uUns[id], keyOnly: !fullUsers}
		s.users.remove(id)
		s.deletedUsers = append(s.deletedUsers, id)
		g.logMut(mutation{kind: mutDelUser, id: id})
		g.delete(0, &before)
	case opDeleteDomain:
		id := g.pickDomain()
		before := image{id: id, a: s.dVer[id], user: s.dUser[id], keyOnly: !fullDomains}
		s.domains.remove(id)
		g.logMut(mutation{kind: mutDelDomain, id: id})
		g.delete(1, &before)
	case opPKUser:
		old := g.pickUser()
		before := image{id: old, a: s.uSel[old], b: s.uUns[old], keyOnly: !fullUsers}
		s.users.remove(old)
		s.deletedUsers = append(s.deletedUsers, old)
		g.logMut(mutation{kind: mutDelUser, id: old})
		id := s.nextUser
		s.growUsers(id)
		after := image{id: id, a: before.a, b: before.b}
		g.putUser(after)
		g.pkChange(0, &before, &after)
	case opPKDomain:
		old := g.pickDomain()
		before := image{id: old, a: s.dVer[old], user: s.dUser[old], keyOnly: !fullDomains}
		s.domains.remove(old)
		g.logMut(mutation{kind: mutDelDomain, id: old})
		id := s.nextDomain
		s.growDomains(id)
		after := image{id: id, a: before.a, user: before.user}
		g.putDomain(after)
		g.pkChange(1, &before, &after)
	case opTruncUsers, opTruncDomains:
		t := 0
		if k == opTruncUsers {
			s.users.clear()
			g.logMut(mutation{kind: mutTruncUsers})
		} else {
			t = 1
			s.domains.clear()
			g.logMut(mutation{kind: mutTruncDomains})
		}
		g.produce(t, 't', 0, nil, nil, nil, p, g.schemaRandom(), false)
	}
}

func (g *Generator) putUser(img image) {
	g.st.putUser(img.id, img.a, img.b)
	g.logMut(mutation{kind: mutPutUser, id: img.id, a: img.a, b: img.b})
}

func (g *Generator) putDomain(img image) {
	g.st.putDomain(img.id, img.a, img.user)
	g.logMut(mutation{kind: mutPutDomain, id: img.id, a: img.a, user: img.user})
}

// update produces an op=u record, with TOAST placeholders for unchanged
// text columns and before per the replica identity.
func (g *Generator) update(t int, full bool, before, after *image) {
	e := g.tables[t]
	var toast []bool
	if g.o.Toast > 0 {
		toast = g.toast[:len(e.cols)]
		for i, c := range e.cols {
			toast[i] = c.text() && e.fingerprint(c, before) == e.fingerprint(c, after) && g.rng.Float64() < g.o.Toast
			if toast[i] {
				g.stats.ToastedColumns++
				if c.kind == colFirst || c.kind == colLast || c.kind == colDomainName {
					g.stats.ToastedProjected++
				}
			}
		}
	}
	b := before
	if !full {
		b = nil
		g.stats.BeforeNull++
	}
	g.produce(t, 'u', after.id, b, after, toast, &g.txPos, g.schemaRandom(), false)
}

// delete produces op=d and, if enabled, a tombstone.
func (g *Generator) delete(t int, before *image) {
	if before.keyOnly {
		g.stats.BeforeKeyOnly++
	}
	if t == 0 {
		g.countOrphans(before.id)
	}
	g.produce(t, 'd', before.id, before, nil, nil, &g.txPos, g.schemaRandom(), g.o.Tombstones)
}

// countOrphans counts domains left pointing at a deleted user (sampled: it
// checks up to 64 live domains, so it stays O(1)).
func (g *Generator) countOrphans(user int64) {
	s := g.st
	for i := 0; i < 64 && i < len(s.domains.ids); i++ {
		if s.dUser[s.domains.ids[i]] == user {
			g.stats.OrphanedChildren++
			return
		}
	}
}

// pkChange produces Debezium's primary-key update: delete(old) + tombstone
// + create(new), all at the update's source position.
func (g *Generator) pkChange(t int, before, after *image) {
	g.delete(t, before)
	g.produce(t, 'c', after.id, nil, after, nil, &g.txPos, g.schemaRandom(), false)
	e := g.tables[t]
	if e.partition(before.id, g.nparts) != e.partition(after.id, g.nparts) {
		g.stats.PKChangeCross++
	}
}

// produce encodes a record into the arena and enqueues it (and a tombstone
// after it when tombstone is set).
func (g *Generator) produce(t int, op byte, id int64, before, after *image, toast []bool, p *pos, schemaOn bool, tombstone bool) {
	e := g.tables[t]
	r := pending{op: op, tsMs: p.procUs / 1000, roundOp: g.roundOp, kOff: -1, kEnd: -1}
	var part int
	if op == 't' {
		part = g.rng.IntN(g.nparts)
	} else {
		r.kOff = int32(len(g.arena))
		g.arena = e.appendKey(g.arena, schemaOn, id)
		r.kEnd = int32(len(g.arena))
		part = e.partition(id, g.nparts)
	}
	r.vOff = int32(len(g.arena))
	g.arena = e.appendValue(g.arena, schemaOn, op, before, after, toast, p)
	r.vEnd = int32(len(g.arena))
	r.tp = int32(t*g.nparts + part)
	if schemaOn {
		g.stats.SchemaOnRecords++
	} else {
		g.stats.SchemaOffRecords++
	}
	switch op {
	case 'c':
		g.stats.Inserts++
	case 'u':
		g.stats.Updates++
	case 'd':
		g.stats.Deletes++
	case 't':
		g.stats.Truncates++
	}
	g.enqueue(r)
	if tombstone {
		r.op, r.vOff, r.vEnd = 0, -1, -1
		g.stats.Tombstones++
		g.enqueue(r)
	}
}

// enqueue appends r to its partition, assigning the next offset.
func (g *Generator) enqueue(r pending) {
	r.offset = g.nextOff[r.tp]
	g.nextOff[r.tp]++
	g.queues[r.tp] = append(g.queues[r.tp], int32(len(g.recs)))
	g.recs = append(g.recs, r)
	g.stats.Records++
}

// redeliver simulates a connector restart that resumes from the position of
// the round's operation `from`: every record produced since is sent again.
func (g *Generator) redeliver(from int32) {
	n := len(g.recs)
	g.stats.Redeliveries++
	for i := 0; i < n; i++ {
		if r := g.recs[i]; r.roundOp >= from {
			r.dup = true
			g.enqueue(r)
			g.stats.Redelivered++
		}
	}
}

// interleave computes the round's consumption order from its queues.
func (g *Generator) interleave() {
	switch g.o.Interleave {
	case InterleaveProduction:
		for i := range g.recs {
			g.order = append(g.order, int32(i))
		}
		return
	case InterleaveParentFirst, InterleaveChildFirst:
		first := 0
		if g.o.Interleave == InterleaveChildFirst {
			first = 1
		}
		for _, t := range [2]int{first, 1 - first} {
			for p := 0; p < g.nparts; p++ {
				g.order = append(g.order, g.queues[t*g.nparts+p]...)
			}
		}
		return
	}
	// Random and bursty merges: draw a tp per step, take its queue head.
	heads := make([]int, len(g.queues))
	if g.o.Interleave == InterleaveRandom {
		// A uniformly random merge = a shuffled multiset of partition ids.
		tps := make([]int32, 0, len(g.recs))
		for tp, q := range g.queues {
			for range q {
				tps = append(tps, int32(tp))
			}
		}
		g.rng.Shuffle(len(tps), func(i, j int) { tps[i], tps[j] = tps[j], tps[i] })
		for _, tp := range tps {
			g.order = append(g.order, g.queues[tp][heads[tp]])
			heads[tp]++
		}
		return
	}
	left := len(g.recs)
	for left > 0 {
		tp := g.rng.IntN(len(g.queues))
		for heads[tp] >= len(g.queues[tp]) {
			tp = (tp + 1) % len(g.queues)
		}
		run := 1 + g.rng.IntN(64)
		for ; run > 0 && heads[tp] < len(g.queues[tp]); run-- {
			g.order = append(g.order, g.queues[tp][heads[tp]])
			heads[tp]++
			left--
		}
	}
}
