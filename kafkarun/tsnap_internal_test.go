package kafkarun

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cdcjoin/cdcjoin/driver"
	"github.com/cdcjoin/cdcjoin/joinstate"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/timejoin"
	"github.com/cdcjoin/cdcjoin/timejoin/timegen"
	"github.com/cdcjoin/cdcjoin/timejoin/timeop"
	"github.com/cdcjoin/cdcjoin/version"
)

// snapPart is one keyed partition's state as a worker keeps it: a pebble
// store, a time-join operator on it, batches committed with the position
// and clock, the rows emitted (seq → row).
type snapPart struct {
	t    *testing.T
	spec *timejoin.Spec
	st   *joinstate.Store
	op   *timeop.Operator
	rows map[uint64]string
}

const snapTopic = "tj.keyed"

func newSnapPart(t *testing.T, s *timejoin.Spec) *snapPart {
	st, err := joinstate.Open(joinstate.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	p := &snapPart{t: t, spec: s, st: st, rows: map[uint64]string{}}
	p.load()
	return p
}

// load makes a new operator on the committed state (as a worker starting).
func (p *snapPart) load() {
	p.op = timeop.New(p.spec, 0)
	tx := p.st.Begin()
	defer tx.Abort()
	if err := p.op.Load(tx); err != nil {
		p.t.Fatal(err)
	}
}

// apply applies msgs (positions from..) in one batch and commits it.
func (p *snapPart) apply(msgs []keyedlog.Msg, from int64) {
	tx := p.st.Begin()
	out := keyedlog.Out{
		Emit:   func(c *row.Change) error { p.rows[c.Version] = timegen.Text(p.spec, c.Values); return nil },
		Reject: func(*keyedlog.Msg, string, int64, int64) error { return nil },
	}
	for i := range msgs {
		if err := p.op.Step(tx, &msgs[i], out); err != nil {
			p.t.Fatal(err)
		}
	}
	if err := tx.SetPosition(snapTopic, 0, from+int64(len(msgs))); err != nil {
		p.t.Fatal(err)
	}
	c := version.Legacy(0)
	c.Raise(0, 7)
	if err := driver.MetaClock.Put(tx, c); err != nil {
		p.t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *snapPart) capture(chunk int) *snapImage {
	tx := p.st.Begin()
	defer tx.Abort()
	img, err := captureState(tx, snapTopic, 0, 0, "id", chunk)
	if err != nil || img == nil {
		p.t.Fatalf("capture: %v %v", img, err)
	}
	return img
}

// aux returns the committed Aux keyspace as text, and the position.
func (p *snapPart) aux() (string, int64) {
	tx := p.st.Begin()
	defer tx.Abort()
	var b bytes.Buffer
	if err := tx.AuxScan(nil, nil, func(k, v []byte) error {
		fmt.Fprintf(&b, "%x=%x\n", k, v)
		return nil
	}); err != nil {
		p.t.Fatal(err)
	}
	pos, _, err := tx.Position(snapTopic, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	return b.String(), pos
}

// install loads img through its encoding (end record encoded and decoded,
// chunks checked) into p in one commit.
func (p *snapPart) install(img *snapImage, chunks [][]byte) error {
	e, err := decodeSnapEnd(img.end(42).encode())
	if err != nil {
		return err
	}
	l, err := decodeSnapshot(e, chunks)
	if err != nil {
		return err
	}
	tx := p.st.Begin()
	if _, err := installSnapshot(tx, snapTopic, 0, l); err != nil {
		tx.Abort()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	p.load()
	return nil
}

// TestSnapshotRoundTrip takes a time-join partition's committed state
// (pebble, timeop) at a position, writes it as a snapshot (chunks of ~300
// bytes, the end record encoded and decoded, the checksum checked),
// installs it into an empty store that had other state, and checks the
// Aux keyspace and the position are the original's; then both go on with
// the rest of the history and must emit the same rows (seq for seq) and
// end with the same Aux keyspace. Negative controls: a flipped byte, a
// missing chunk or chunks swapped are refused; a snapshot from an earlier
// position installed as if it were the later one ends with other rows or
// another state in some round.
func TestSnapshotRoundTrip(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	differed := 0
	for round := 0; round < 6; round++ {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		kind := []timejoin.Kind{timejoin.Interval, timejoin.Window, timejoin.Temporal}[round%3]
		jt := []timejoin.JoinType{timejoin.Inner, timejoin.LeftOuter}[round/3%2]
		s := &timejoin.Spec{Kind: kind, Join: jt, Lower: -2, Upper: 3, Size: 4, Slide: 2, OutOfOrderness: 2, AllowedLateness: 1,
			LeftWidth: 1, RightWidth: 1, Out: []timejoin.Column{{From: timejoin.FromLeft}, {From: timejoin.FromRight}}}
		events := timegen.Generate(rng, timegen.Options{Kind: kind, N: 500, OutOfOrderness: 2})
		msgs := make([]keyedlog.Msg, len(events))
		for i, e := range events {
			r := timejoin.Record{Side: e.Side, Partition: e.Partition, Op: e.Op, Time: e.Time, PK: []byte(e.PK)}
			if e.Op == timejoin.Insert {
				k := row.String(e.Key)
				if e.Key == "" {
					k, r.KeyNull = row.Null(), true
				}
				v := row.String(e.Val)
				if e.Val == "?" {
					v = row.Unavailable()
				}
				r.Key, r.Row = row.AppendKey(nil, []row.Value{k}), []row.Value{v}
			}
			key, val := keyedlog.AppendTime(nil, nil, &r, keyedlog.TimeSource{Partition: e.Partition, Offset: int64(i)})
			if err := keyedlog.Decode(nil, key, val, nil, &msgs[i]); err != nil {
				t.Fatal(err)
			}
			msgs[i].Pos = int64(i)
		}
		cut := 150 + rng.IntN(200)
		orig := newSnapPart(t, s)
		var early *snapImage
		for from := 0; from < cut; from += 37 {
			to := min(from+37, cut)
			orig.apply(msgs[from:to], int64(from))
			if early == nil && to >= cut/2 {
				early = orig.capture(300)
			}
		}
		img := orig.capture(300)
		if len(img.chunks) < 2 || img.pos != int64(cut) {
			t.Fatalf("round %d: %d chunks at %d (want several, at %d)", round, len(img.chunks), img.pos, cut)
		}
		// Negative controls on the encoding.
		flipped := bytes.Clone(img.chunks[len(img.chunks)/2])
		flipped[len(flipped)/2] ^= 1
		bad := map[string][][]byte{
			"a flipped byte":  append(append(append([][]byte(nil), img.chunks[:len(img.chunks)/2]...), flipped), img.chunks[len(img.chunks)/2+1:]...),
			"a missing chunk": img.chunks[1:],
			"chunks swapped":  append([][]byte{img.chunks[1], img.chunks[0]}, img.chunks[2:]...),
		}
		for what, chunks := range bad {
			if err := newSnapPart(t, s).install(img, chunks); err == nil {
				t.Fatalf("round %d: a snapshot with %s was accepted", round, what)
			}
		}
		// The copy: a store with other state (a stale disk), replaced.
		cp := newSnapPart(t, s)
		cp.apply(msgs[cut:min(cut+40, len(msgs))], int64(cut))
		if err := cp.install(img, img.chunks); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		wantAux, wantPos := orig.aux()
		if gotAux, gotPos := cp.aux(); gotAux != wantAux || gotPos != wantPos {
			t.Fatalf("round %d: the installed state differs from the original (position %d, want %d; %d vs %d bytes of Aux text)", round, gotPos, wantPos, len(gotAux), len(wantAux))
		}
		clear(cp.rows)
		base := map[uint64]string{}
		for k, v := range orig.rows {
			base[k] = v
		}
		clear(orig.rows)
		// A wrong snapshot: the earlier image installed at the later
		// position (its position rewritten).
		wrong := newSnapPart(t, s)
		early.pos = img.pos
		if err := wrong.install(early, early.chunks); err != nil {
			t.Fatal(err)
		}
		for from := cut; from < len(msgs); from += 37 {
			to := min(from+37, len(msgs))
			orig.apply(msgs[from:to], int64(from))
			cp.apply(msgs[from:to], int64(from))
			wrong.apply(msgs[from:to], int64(from))
		}
		if fmt.Sprint(cp.rows) != fmt.Sprint(orig.rows) {
			t.Fatalf("round %d %s %s: after the snapshot the copy emitted %d rows, the original %d (or other ones)", round, kind, jt, len(cp.rows), len(orig.rows))
		}
		wantAux, _ = orig.aux()
		if gotAux, _ := cp.aux(); gotAux != wantAux {
			t.Fatalf("round %d: the states differ at the end", round)
		}
		wrongAux, _ := wrong.aux()
		if fmt.Sprint(wrong.rows) != fmt.Sprint(orig.rows) || wrongAux != wantAux {
			differed++
		}
		t.Logf("round %d %s %s: snapshot at %d: %d entries, %d bytes, %d chunks; %d rows before, %d after", round, kind, jt, img.pos, img.entries, img.bytes, len(img.chunks), len(base), len(orig.rows))
	}
	if differed == 0 {
		t.Fatalf("seed %d: negative control: a snapshot from the wrong position gave the same rows and state in every round", seed)
	}
}
