package skew_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/skew"
)

// TestInteraction drives Routers of several keyed partitions with scripts
// (testdata/router), in the style of etcd raft's interaction tests: each
// partition is a log of keyed-log records (encoded, read back through
// keyedlog.Decode, as the join stage reads them), a committed and a
// working keyed.MemState, a Router, the changes it emitted and the records
// it sent since its last flush. Commands:
//
//	init partitions=N hot=H cool=C salts=S chunk=K [left]
//	input                      one keyed input per line, appended to its key's partition
//	                           (a truncate to every partition), with the next version:
//	  parent id=1 name=Egor | parent-delete id=1 | child id=10 user=1 domain=a.com |
//	  child-delete id=10 user=1 | truncate side=parent|child
//	layout p=P key=K op=salt|cool            a layout record into P's log
//	ack p=P key=K salt=S origin=O            a release confirmation into P's log
//	forwarded p=P key=K salt=S side=parent|child [child=C] mode=apply|copy|release
//	          version=V origin=O sub=N [delete] [name=…|domain=…]   a forward into P's log
//	step p=P [n=N]             steps up to N records of P's log (default all), each
//	                           followed by one Advance of chunk rows; prints every message,
//	                           the changes it emitted and the records it sent
//	advance p=P [budget=B]     advances P's work in progress (default: chunk)
//	flush p=P [crash]          the batch commits: its changes reach the sink, its records
//	                           the target logs, its state and position commit (crash: the
//	                           process dies before the state commit; it restarts from the
//	                           last one)
//	crash p=P [lose-state]     the batch is lost: state and position back to the last
//	                           commit (lose-state: to nothing; the partition rebuilds from
//	                           its log, quiet and silent below its last quiet commit)
//	state [p=P]                salted keys, work in progress, positions
//	table                      the join of the partitions' states and the sink's live rows
//
// A step below a partition's emit-from position is printed "(silent)", one
// below its forward-from position "(quiet)".
func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata/router", func(t *testing.T, path string) {
		var h *ddRouters
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "init" {
				h = newDDRouters(t, d)
				return ""
			}
			if h == nil {
				d.Fatalf(t, "init first")
			}
			var b strings.Builder
			h.w = &b
			switch d.Cmd {
			case "input":
				for _, ln := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					h.input(t, d, strings.Fields(ln))
				}
			case "layout", "ack", "forwarded":
				h.record(t, d)
			case "step":
				h.step(t, h.part(t, d), intArg(t, d, "n", -1))
			case "advance":
				p := h.part(t, d)
				h.advance(t, p, intArg(t, d, "budget", h.cfg.Chunk))
			case "flush":
				p := h.part(t, d)
				h.flush(p, d.HasArg("crash"))
				if d.HasArg("crash") {
					h.crash(t, p, false)
				}
			case "crash":
				h.crash(t, h.part(t, d), d.HasArg("lose-state"))
			case "state":
				h.state(t, d)
			case "table":
				h.table(t)
			default:
				d.Fatalf(t, "unknown command %s", d.Cmd)
			}
			out := b.String()
			if out == "" {
				return "ok\n"
			}
			return out
		})
	})
}

type ddRec struct{ key, val, hdr []byte }

type ddPart struct {
	p                     int32
	log                   []ddRec
	st, committed         *keyed.MemState
	pos, cpos             int
	quietPos              int // the last committed position without work in progress (Kafka's offset)
	emitFrom, forwardFrom int
	r                     *skew.Router
	out                   []row.Change
	sent                  []ddSent
	h                     *ddRouters
	msg                   keyedlog.Msg
}

type ddSent struct {
	part int32
	rec  ddRec
}

type ddRouters struct {
	spec  *keyed.Spec
	cfg   skew.RouterConfig
	parts []*ddPart
	sink  map[string]ddRow // row key → last flushed change
	w     *strings.Builder
}

type ddRow struct {
	ver  uint64
	del  bool
	vals string
}

func newDDRouters(t *testing.T, d *datadriven.TestData) *ddRouters {
	h := &ddRouters{spec: testSpec(t, d.HasArg("left")), sink: map[string]ddRow{}}
	h.cfg = skew.RouterConfig{Partitions: int32(intArg(t, d, "partitions", 2)), Hot: int64(intArg(t, d, "hot", 3)),
		Cool: int64(intArg(t, d, "cool", 1)), Salts: intArg(t, d, "salts", 2), Chunk: intArg(t, d, "chunk", 2)}
	for p := int32(0); p < h.cfg.Partitions; p++ {
		dp := &ddPart{p: p, h: h, st: keyed.NewMemState(), committed: keyed.NewMemState()}
		h.parts = append(h.parts, dp)
		h.open(t, dp)
	}
	return h
}

func (h *ddRouters) open(t *testing.T, p *ddPart) {
	cfg := h.cfg
	cfg.Partition = p.p
	p.r = skew.NewRouter(h.spec, cfg)
	p.r.OnLayout = func(jk []byte, hot bool, children int64, salts int) {
		what := "cooled"
		if hot {
			what = "salted"
		}
		fmt.Fprintf(h.w, "  %s key %s (%d children, %d salts)\n", what, keyString(jk), children, salts)
	}
	if err := p.r.Load(p.st); err != nil {
		t.Fatal(err)
	}
}

func (h *ddRouters) part(t *testing.T, d *datadriven.TestData) *ddPart {
	p := intArg(t, d, "p", -1)
	if p < 0 || p >= len(h.parts) {
		d.Fatalf(t, "%s needs p=0..%d", d.Cmd, len(h.parts)-1)
	}
	return h.parts[p]
}

func intArg(t *testing.T, d *datadriven.TestData, name string, def int) int {
	if !d.HasArg(name) {
		return def
	}
	var s string
	d.ScanArgs(t, name, &s)
	n, err := strconv.Atoi(s)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", name, s, err)
	}
	return n
}

// kv parses name=value fields.
func kv(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func num(t *testing.T, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// input appends one keyed input (as the keying stage would produce it) to
// its partition's log. Its version is the partition's clock at its
// position when stepped: 1000·(partition+1) + position.
func (h *ddRouters) input(t *testing.T, d *datadriven.TestData, f []string) {
	if len(f) == 0 {
		return
	}
	a := kv(f[1:])
	var in keyed.Input
	switch f[0] {
	case "parent":
		id := num(t, a["id"])
		in = keyed.Input{Kind: keyed.ParentUpsert, Side: row.Parent, JoinKey: key(id), Row: []row.Value{row.Int(id), row.String(a["name"])}}
	case "parent-delete":
		in = keyed.Input{Kind: keyed.ParentDelete, Side: row.Parent, JoinKey: key(num(t, a["id"]))}
	case "child":
		id, user := num(t, a["id"]), num(t, a["user"])
		in = keyed.Input{Kind: keyed.ChildUpsert, Side: row.Child, JoinKey: key(user), ChildKey: key(id),
			Row: []row.Value{row.Int(id), row.Int(user), row.String(a["domain"])}}
	case "child-delete":
		in = keyed.Input{Kind: keyed.ChildDelete, Side: row.Child, JoinKey: key(num(t, a["user"])), ChildKey: key(num(t, a["id"]))}
	case "truncate":
		in = keyed.Input{Kind: keyed.Truncate, Side: row.Parent}
		if a["side"] == "child" {
			in.Side = row.Child
		}
	default:
		d.Fatalf(t, "unknown input %q", f[0])
	}
	rec := ddRec{key: keyedlog.AppendInputKey(nil, &in), val: keyedlog.AppendInputValue(nil, &in)}
	if in.Kind == keyed.Truncate {
		for _, p := range h.parts {
			h.appendLog(p, rec)
		}
		return
	}
	h.appendLog(h.parts[keyedlog.Partition(in.JoinKey, h.cfg.Partitions)], rec)
}

func (h *ddRouters) appendLog(p *ddPart, rec ddRec) {
	fmt.Fprintf(h.w, "p%d@%d: %s\n", p.p, len(p.log), recString(h.spec, rec))
	p.log = append(p.log, rec)
}

// record appends a layout record, an ack or a forward to a partition's log.
func (h *ddRouters) record(t *testing.T, d *datadriven.TestData) {
	p := h.part(t, d)
	var k string
	d.ScanArgs(t, "key", &k)
	jk := key(num(t, k))
	var rec ddRec
	switch d.Cmd {
	case "layout":
		var op string
		d.ScanArgs(t, "op", &op)
		l := keyedlog.LayoutSalt
		if op == "cool" {
			l = keyedlog.LayoutCool
		}
		rec = ddRec{key: keyedlog.AppendLayoutKey(nil, jk), val: keyedlog.LayoutValue(l)}
	case "ack":
		rec = ddRec{key: keyedlog.AppendAckKey(nil, jk, uint16(intArg(t, d, "salt", 0))), val: keyedlog.AckValue(int64(intArg(t, d, "origin", 0)))}
	case "forwarded":
		f := keyedlog.Forward{JoinKey: jk, Salt: uint16(intArg(t, d, "salt", 0)), Side: row.Parent,
			Version: uint64(intArg(t, d, "version", 0)), Origin: int64(intArg(t, d, "origin", 0)), Sub: uint32(intArg(t, d, "sub", 0)),
			Delete: d.HasArg("delete")}
		var mode, side string
		d.ScanArgs(t, "mode", &mode)
		switch mode {
		case "apply":
			f.Mode = keyedlog.ModeApply
		case "copy":
			f.Mode = keyedlog.ModeCopy
		case "release":
			f.Mode = keyedlog.ModeRelease
		}
		if d.HasArg("side") {
			d.ScanArgs(t, "side", &side)
		}
		if side == "child" {
			c := int64(intArg(t, d, "child", 0))
			f.Side, f.ChildKey = row.Child, key(c)
			var dom string
			if d.HasArg("domain") {
				d.ScanArgs(t, "domain", &dom)
			}
			f.Row = []row.Value{row.Int(c), row.Int(num(t, k)), row.String(dom)}
		} else {
			var name string
			if d.HasArg("name") {
				d.ScanArgs(t, "name", &name)
			}
			f.Row = []row.Value{row.Int(num(t, k)), row.String(name)}
		}
		rec = ddRec{key: keyedlog.AppendForwardKey(nil, &f), val: keyedlog.AppendForwardValue(nil, &f), hdr: keyedlog.AppendForwardHeader(nil, &f)}
		if f.Delete {
			rec.val = nil
		}
	}
	h.appendLog(p, rec)
}

// Send implements keyedlog.Sender: the record waits for the batch's flush.
func (p *ddPart) Send(part int32, k, v, hdr []byte) error {
	cp := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		return slices.Clone(b)
	}
	rec := ddRec{cp(k), cp(v), cp(hdr)}
	p.sent = append(p.sent, ddSent{part, rec})
	fmt.Fprintf(p.h.w, "  send p%d: %s\n", part, recString(p.h.spec, rec))
	return nil
}

// out is p's Out for work at position pos.
func (p *ddPart) outAt(pos int) keyedlog.Out {
	emit := func(c *row.Change) error {
		if pos < p.emitFrom {
			return nil
		}
		p.out = append(p.out, cloneChange(c))
		fmt.Fprintf(p.h.w, "  emit %s\n", ddChange(c))
		return nil
	}
	return keyedlog.Out{Emit: emit, Send: p, Quiet: pos < p.forwardFrom}
}

func (h *ddRouters) step(t *testing.T, p *ddPart, n int) {
	for k := 0; (n < 0 || k < n) && p.pos < len(p.log); k++ {
		rec := p.log[p.pos]
		mark := ""
		switch {
		case p.pos < p.forwardFrom:
			mark = " (quiet)"
		case p.pos < p.emitFrom:
			mark = " (silent)"
		}
		fmt.Fprintf(h.w, "p%d@%d%s: %s\n", p.p, p.pos, mark, recString(h.spec, rec))
		if err := keyedlog.Decode(h.spec, rec.key, rec.val, rec.hdr, &p.msg); err != nil {
			t.Fatal(err)
		}
		p.msg.Pos, p.msg.Version = int64(p.pos), uint64(1000*(int(p.p)+1)+p.pos)
		if err := p.r.Step(p.st, &p.msg, p.outAt(p.pos)); err != nil {
			fmt.Fprintf(h.w, "  error: %v\n", err)
			return
		}
		p.pos++
		budget := h.cfg.Chunk
		if p.pos <= p.emitFrom {
			budget = -1 // rebuilding: work is done at once, silently
		}
		if _, err := p.r.Advance(p.st, budget, p.outAt(p.pos)); err != nil {
			fmt.Fprintf(h.w, "  error: %v\n", err)
			return
		}
	}
}

func (h *ddRouters) advance(t *testing.T, p *ddPart, budget int) {
	used, err := p.r.Advance(p.st, budget, p.outAt(p.pos))
	if err != nil {
		fmt.Fprintf(h.w, "error: %v\n", err)
		return
	}
	fmt.Fprintf(h.w, "p%d: advanced %d\n", p.p, used)
}

func (h *ddRouters) flush(p *ddPart, crash bool) {
	for i := range p.out {
		c := &p.out[i]
		k := ddRowKey(c)
		if old, ok := h.sink[k]; !ok || c.Version >= old.ver {
			h.sink[k] = ddRow{c.Version, c.Op == row.Retract, fmtVals(c.Values)}
		}
	}
	fmt.Fprintf(h.w, "p%d: flushed %d changes, %d records", p.p, len(p.out), len(p.sent))
	for _, s := range p.sent {
		h.parts[s.part].log = append(h.parts[s.part].log, s.rec)
	}
	p.out, p.sent = p.out[:0], p.sent[:0]
	if crash {
		fmt.Fprintln(h.w, "; crashed before the state commit")
		return
	}
	fmt.Fprintf(h.w, "; committed at %d", p.pos)
	p.committed, p.cpos = p.st.Clone(), p.pos
	if !p.r.Busy() {
		p.quietPos = p.cpos
		fmt.Fprint(h.w, " (quiet)")
	}
	fmt.Fprintln(h.w)
}

func (h *ddRouters) crash(t *testing.T, p *ddPart, lose bool) {
	p.out, p.sent = p.out[:0], p.sent[:0]
	if lose {
		p.committed, p.cpos = keyed.NewMemState(), 0
		p.emitFrom, p.forwardFrom = p.quietPos, p.quietPos
	}
	p.st, p.pos = p.committed.Clone(), p.cpos
	h.open(t, p)
	fmt.Fprintf(h.w, "p%d: restarted at %d (emit from %d, forward from %d)\n", p.p, p.pos, p.emitFrom, p.forwardFrom)
	if p.pos < p.emitFrom {
		if _, err := p.r.Advance(p.st, -1, p.outAt(p.pos)); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *ddRouters) state(t *testing.T, d *datadriven.TestData) {
	parts := h.parts
	if d.HasArg("p") {
		parts = []*ddPart{h.part(t, d)}
	}
	for _, p := range parts {
		keys, waiting := p.r.Backlog()
		fmt.Fprintf(h.w, "p%d: at %d of %d, committed %d, busy %v, runnable %v, work on %d keys, %d inputs waiting",
			p.p, p.pos, len(p.log), p.cpos, p.r.Busy(), p.r.Runnable(), keys, waiting)
		if n := p.r.Stats.Duplicate; n > 0 {
			fmt.Fprintf(h.w, ", %d duplicate forwards dropped", n)
		}
		fmt.Fprintln(h.w)
		for _, hk := range p.r.HotKeys() {
			cool := ""
			if hk.Cooling {
				cool = ", cooling"
			}
			fmt.Fprintf(h.w, "  hot key %s: %d children, %d salts%s\n", keyString(hk.JoinKey), hk.Children, hk.Salts, cool)
		}
	}
}

func (h *ddRouters) table(t *testing.T) {
	var own []string
	for _, p := range h.parts {
		own = append(own, materialize(t, p.st, h.spec)...)
	}
	sortStrings(own)
	var live []string
	for k, r := range h.sink {
		if !r.del {
			live = append(live, k+" "+r.vals)
		}
	}
	sortStrings(live)
	fmt.Fprintln(h.w, "join:")
	for _, r := range own {
		fmt.Fprintln(h.w, " ", r)
	}
	fmt.Fprintln(h.w, "sink:")
	for _, r := range live {
		fmt.Fprintln(h.w, " ", r)
	}
	if !slices.Equal(own, live) {
		fmt.Fprintln(h.w, "(the sink differs from the join)")
	}
}

func keyString(jk []byte) string {
	vals, _, err := row.DecodeKey(nil, jk, 1)
	if err != nil {
		return fmt.Sprintf("%x", jk)
	}
	return vals[0].Text()
}

func fmtVals(vs []row.Value) string { return valsText(vs) }

func ddRowKey(c *row.Change) string { return rowKeyOf(c) }

func ddChange(c *row.Change) string {
	s := fmt.Sprintf("%s v%d %s [%s]", c.Op, c.Version, ddRowKey(c), fmtVals(c.Values))
	if c.Prev != nil || c.Op == row.Retract {
		s += fmt.Sprintf(" prev@v%d", c.PrevVersion)
	}
	return s
}

// recString renders a keyed-log record.
func recString(spec *keyed.Spec, rec ddRec) string {
	var m keyedlog.Msg
	if err := keyedlog.Decode(spec, rec.key, rec.val, rec.hdr, &m); err != nil {
		return "undecodable: " + err.Error()
	}
	switch m.Kind {
	case keyedlog.KindInput:
		in := &m.In
		switch in.Kind {
		case keyed.Truncate:
			return "truncate " + in.Side.String()
		case keyed.ParentUpsert, keyed.ParentDelete:
			return fmt.Sprintf("%s %s [%s]", in.Kind, keyString(in.JoinKey), fmtVals(in.Row))
		}
		return fmt.Sprintf("%s %s|%s [%s]", in.Kind, keyString(in.JoinKey), keyString(in.ChildKey), fmtVals(in.Row))
	case keyedlog.KindLayout:
		op := "salt"
		if m.Layout == keyedlog.LayoutCool {
			op = "cool"
		}
		return fmt.Sprintf("layout %s %s", op, keyString(m.JoinKey))
	case keyedlog.KindAck:
		return fmt.Sprintf("ack %s salt %d origin %d", keyString(m.JoinKey), m.Salt, m.Origin)
	case keyedlog.KindForward:
		f := &m.Fwd
		mode := map[keyedlog.Mode]string{keyedlog.ModeApply: "apply", keyedlog.ModeCopy: "copy", keyedlog.ModeRelease: "release"}[f.Mode]
		what := keyString(f.JoinKey)
		if f.Side == row.Child {
			what += "|" + keyString(f.ChildKey)
		}
		s := fmt.Sprintf("forward %s %s salt %d v%d origin %d.%d", mode, what, f.Salt, f.Version, f.Origin, f.Sub)
		if f.Delete {
			return s + " delete"
		}
		if f.Mode != keyedlog.ModeRelease {
			s += fmt.Sprintf(" [%s]", fmtVals(f.Row))
		}
		return s
	}
	return m.Kind.String()
}
