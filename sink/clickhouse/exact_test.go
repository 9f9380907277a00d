package clickhouse

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/internal/testenv"
	"github.com/cdcjoin/cdcjoin/sink"
)

func TestMarkerVersions(t *testing.T) {
	for _, c := range []struct {
		pos  int64
		i    int
		last bool
		want sink.Delivery
	}{
		{0, 1, false, sink.Delivery{Pos: 0, Chunks: 1}},
		{17, 3, false, sink.Delivery{Pos: 17, Chunks: 3}},
		{17, 0, true, sink.Delivery{Pos: 17, Complete: true}},
		{maxPosition, maxCuts, false, sink.Delivery{Pos: maxPosition, Chunks: maxCuts}},
	} {
		if got := deliveryOf(markerVersion(c.pos, c.i, c.last)); got != c.want {
			t.Errorf("%+v: got %+v", c, got)
		}
	}
	// Versions grow with every INSERT: cuts of a batch, its end, the next
	// batch's cuts (which begins where the last one ended).
	seq := []uint64{markerVersion(5, 1, false), markerVersion(5, 2, false), markerVersion(9, 0, true),
		markerVersion(9, 1, false), markerVersion(12, 0, true), markerVersion(12, 1, false)}
	for i := 1; i < len(seq); i++ {
		if seq[i] <= seq[i-1] {
			t.Errorf("marker %d (%x) is not above marker %d (%x)", i, seq[i], i-1, seq[i-1])
		}
	}
	if d := deliveryOf(0); !d.Complete || d.Pos != 0 {
		t.Errorf("no marker: %+v", d)
	}
}

// TestExactReplay: a driver of a changelog sink with delivery markers
// crashes (the sink is closed mid-batch, INSERTs in flight cancelled) at
// random points, loses its committed position now and then (a state
// rebuilt from scratch), and replays from where it stands: what Delivered
// reports makes it skip what landed. Every row's sum(_sign) ends at 0 or
// 1 and the live rows equal the model. TestExactNegativeControl runs the
// same driver on a sink without markers: the same crashes double-count.
func TestExactReplay(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	sd := seed(t)
	t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", sd, sd)
	cfg := testConfig(t, addr, config.ModeChangelog, "left", "")
	m, crashes, skipped := crashingDriver(t, sd, func(ctx context.Context) (positioned, error) {
		return OpenExact(ctx, cfg, Options{Types: testTypes(), Stream: "test/0"})
	})
	t.Logf("%d crashes, %d partial batches replayed", crashes, skipped)
	if crashes < 10 || skipped == 0 {
		t.Errorf("the faults did not fire enough: %d crashes, %d partial batches replayed", crashes, skipped)
	}
	conn := rawConn(t, addr)
	s := openSink(t, cfg, testTypes())
	compare(t, sd, actual(t, conn, cfg, s.Server()), m.expected(s.Server()))
	var markers uint64
	var sum int64
	q := fmt.Sprintf("SELECT count(), sum(_sign) FROM %s WHERE _pk = %s", tableName(cfg.ClickHouse), sqlString(markerPK))
	if err := conn.QueryRow(context.Background(), q).Scan(&markers, &sum); err != nil {
		t.Fatal(err)
	}
	if sum != 0 || markers == 0 {
		t.Errorf("%d marker rows with sum(_sign) %d, want some with 0", markers, sum)
	}
}

// TestExactNegativeControl: the driver of TestExactReplay on a changelog
// sink without markers (Flush at the end of each batch, the position
// committed after it, as before): what landed before a crash is inserted
// again, and some rows' sum(_sign) leaves {0, 1}. The check that passes
// TestExactReplay must fail here.
func TestExactNegativeControl(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	sd := seed(t)
	t.Logf("seed %d (rerun with CDCJOIN_SEED=%d)", sd, sd)
	cfg := testConfig(t, addr, config.ModeChangelog, "left", "")
	crashingDriver(t, sd, func(ctx context.Context) (positioned, error) {
		s, err := Open(ctx, cfg, Options{Types: testTypes()})
		return plain{s}, err
	})
	conn := rawConn(t, addr)
	q := fmt.Sprintf("SELECT count() FROM (SELECT sum(_sign) AS n FROM %s GROUP BY _pk, _ck HAVING n NOT IN (0, 1))", tableName(cfg.ClickHouse))
	var bad uint64
	if err := conn.QueryRow(context.Background(), q).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad == 0 {
		t.Fatal("the negative control passed: crashes without markers left no row double-counted, so the check proves nothing")
	}
	t.Logf("without markers, %d row keys have sum(_sign) outside {0, 1}", bad)
}

// positioned is what crashingDriver needs of a sink.
type positioned interface {
	sink.Positioned
	sink.Batcher
	inFlight() int
}

// inFlight counts the sealed batches not finished yet.
func (s *Sink) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// plain drives a sink without markers like a Positioned one: End is Flush,
// nothing is ever known to be delivered.
type plain struct{ *Sink }

func (p plain) Delivered(context.Context) (sink.Delivery, error) {
	return sink.Delivery{Complete: true}, nil
}
func (p plain) Begin(int64) error                      { return nil }
func (p plain) Replaying() bool                        { return false }
func (p plain) End(ctx context.Context, _ int64) error { return p.Flush(ctx) }

// crashingDriver writes 3,000 random changes (position = index) in batches
// through sinks from open, crashing 15 times at random points after some
// INSERTs landed (closing the sink without ending the batch), forgetting
// its committed position now and then, and replaying as Delivered says. It
// returns the model of the changes, the crashes and how many partial
// batches were replayed.
func crashingDriver(t *testing.T, sd uint64, open func(context.Context) (positioned, error)) (*model, int, int) {
	t.Helper()
	r := rand.New(rand.NewPCG(sd, 5))
	m := &model{rows: map[rowKey]mrow{}}
	changes := m.gen(r, 3000, true)
	ctx := context.Background()
	committed := int64(0) // the driver's durable position
	crashes, skipped := 0, 0
	for run := 0; ; run++ {
		if run > 200 {
			t.Fatal("no progress after 200 runs")
		}
		s, err := open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d, err := s.Delivered(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.IntN(8) == 0 {
			committed = 0 // the state was lost: rebuilt, emitting nothing below d
		}
		pos := committed
		if d.Pos > pos {
			pos = d.Pos // applied without writing (delivered before)
		}
		if !d.Complete && d.Pos == pos && d.Chunks > 0 {
			skipped++
		}
		crashAt := -1
		if crashes < 15 {
			crashAt = int(pos) + 1 + r.IntN(300)
		}
		for pos < int64(len(changes)) {
			if err := s.Begin(pos); err != nil {
				t.Fatal(err)
			}
			end := pos
			// Some batches end when the sink is full, others run long
			// enough to be cut into several INSERTs.
			useFull := r.IntN(2) == 0
			for end < int64(len(changes)) {
				if err := s.Write(ctx, changes[end:end+1]); err != nil {
					t.Fatal(err)
				}
				end++
				if int(end) == crashAt {
					break
				}
				if !s.Replaying() && (useFull && s.Full() || r.IntN(150) == 0) {
					break
				}
			}
			if int(end) == crashAt {
				// Let what was sent land, so that the crash leaves
				// uncommitted rows behind.
				deadline := time.Now().Add(10 * time.Second)
				for s.inFlight() > 0 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				break
			}
			if err := s.End(ctx, end); err != nil {
				t.Fatal(err)
			}
			pos, committed = end, end
		}
		s.Close()
		if pos >= int64(len(changes)) {
			break
		}
		crashes++
	}
	return m, crashes, skipped
}

// TestExactLanded: an INSERT's marker tells whether it landed (asked
// before a retry).
func TestExactLanded(t *testing.T) {
	addr := testenv.Require(t, testenv.ClickHouseEnv, "ClickHouse")
	cfg := testConfig(t, addr, config.ModeChangelog, "inner", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := OpenExact(ctx, cfg, Options{Types: testTypes(), Stream: "landed"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Delivered(ctx); err != nil {
		t.Fatal(err)
	}
	m := &model{rows: map[rowKey]mrow{}}
	if err := s.Begin(3); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, m.gen(rand.New(rand.NewPCG(1, 1)), 10, false)); err != nil {
		t.Fatal(err)
	}
	if err := s.End(ctx, 7); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		v    uint64
		want bool
	}{{markerVersion(7, 0, true), true}, {markerVersion(3, 1, false), true}, {markerVersion(7, 1, false), false}} {
		got, err := s.landed(ctx, c.v)
		if err != nil || got != c.want {
			t.Errorf("landed(%x) = %v, %v; want %v", c.v, got, err, c.want)
		}
	}
	if d, err := s.Delivered(ctx); err != nil || d != (sink.Delivery{Pos: 7, Complete: true}) {
		t.Errorf("Delivered = %+v, %v", d, err)
	}
}
