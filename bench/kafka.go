package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/keyedlog"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
)

// kafkaDriver runs the real Kafka runtime (kafkarun.Run: keying stage with
// Kafka transactions, join stage on pebble) against an in-process kfake
// cluster or real brokers. Several producers (one generator OS thread and
// one kgo.Client each, disjoint id ranges) write each phase's records into
// the Debezium topics.
//
// Completion: a phase is over when the sink has acknowledged a round of
// fence rows: one fence parent F(s,p) per (source partition s, keyed
// partition p), living on parent partition s, with one child C(s,p) on
// child partition s. After every producer's records of the phase are
// acknowledged by the brokers, the driver renames every F(s,p) and updates
// every C(s,p); Kafka's per-partition order, the keying stage's in-order
// processing of a source partition and the join's in-order processing of a
// keyed partition then mean that when all 2·S·K fence changes reached the
// sink, every earlier record has been joined and flushed.
//
// Owner: newKafkaDriver starts the cluster (kfake), the runtime and the
// producers' generators; close stops and waits for all of them.
type kafkaDriver struct {
	o     Options
	p     plan
	smp   *sampler
	pr    *probes
	inner sink.Sink // the ClickHouse sink, or nil (a null sink per instance)
	fs    *fences
	hot   *hotWatch
	cl    *kfake.Cluster // nil on a real cluster
	prods []*producer
	syn   *synth // fences (driver goroutine only)

	parentTopic, childTopic string
	stateDir                string
	parts                   int32
	cfg                     *config.Config // the job (each instance gets its own state dir and id)

	cancel context.CancelFunc // stops pollConsumed
	wg     sync.WaitGroup     // pollConsumed
	mu     sync.Mutex         // guards runs (pollConsumed reads them)
	runs   []*benchRun
	round  int
	storms int // storm phases run
	genCPU []float64
}

// benchRun is one instance: a kafkarun.Run with its own registry and sink.
type benchRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done closes
	reg    *prometheus.Registry
	ps     *probeSink
}

// producer is one parallel producer: its own generator (source) and client.
type producer struct {
	i   int
	src *source
	cl  *kgo.Client
	syn *synth
}

// Fence ids: above the probes' range (probeChild0 + seq stays far below).
const (
	fenceParent0 = int64(1) << 47
	fenceChild0  = fenceParent0 + int64(1)<<40
)

func newKafkaDriver(ctx context.Context, o Options, p plan, stateDir string, inner sink.Sink, smp *sampler, pr *probes) (d *kafkaDriver, err error) {
	d = &kafkaDriver{o: o, p: p, smp: smp, pr: pr, stateDir: stateDir, parts: int32(o.Workload.Partitions),
		inner: inner, hot: &hotWatch{}}
	defer func() {
		if err != nil {
			d.close()
			d = nil
		}
	}()
	syn := newSynth()
	brokers := o.Brokers
	group := "bench"
	if len(brokers) == 0 {
		d.parentTopic, d.childTopic = syn.parentTopic, syn.childTopic
		d.cl, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(d.parts, d.parentTopic, d.childTopic))
		if err != nil {
			return d, fmt.Errorf("cdcjoin: bench: kfake: %w", err)
		}
		brokers = d.cl.ListenAddrs()
	} else {
		// A real cluster: fresh topics and groups per run.
		sfx := time.Now().UTC().Format("20060102t150405") + fmt.Sprintf("-%d", os.Getpid())
		d.parentTopic, d.childTopic = syn.parentTopic+".bench-"+sfx, syn.childTopic+".bench-"+sfx
		group = "bench-" + sfx
		if err := createTopics(ctx, brokers, d.parts, d.parentTopic, d.childTopic); err != nil {
			return d, err
		}
	}
	d.syn = &synth{parentTopic: d.parentTopic, childTopic: d.childTopic}
	extra := fmt.Sprintf("kafka:\n  brokers: [%s]\n  group: %s\n  instance_id: bench-%d\n  keyed_partitions: %d\n  commit_interval: 200ms\n  session_timeout: 10s\n  transaction_timeout: 30s\n",
		strings.Join(brokers, ", "), group, os.Getpid(), d.parts)
	if inner == nil && o.ClickHouse != "" {
		return d, errors.New("cdcjoin: bench: internal: clickhouse sink not opened")
	}
	d.cfg, err = jobConfigTopics(o, d.parentTopic, d.childTopic, stateDir, extra+clickhouseExtra(o))
	if err != nil {
		return d, err
	}
	d.fs = newFences(int(d.parts), int(d.parts))

	// Producers, each with its own generator thread.
	n := o.Producers
	for i := 0; i < n; i++ {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(5*time.Millisecond),
			kgo.MaxBufferedRecords(64<<10), kgo.ProducerBatchMaxBytes(1<<20))
		if err != nil {
			return d, fmt.Errorf("cdcjoin: bench: kafka producer: %w", err)
		}
		pd := &producer{i: i, cl: cl, syn: &synth{parentTopic: d.parentTopic, childTopic: d.childTopic}}
		d.prods = append(d.prods, pd)
		// Synthetic rows (hot parent, its children, renames) come from
		// producer 0 on partition 0.
		pd.src, err = newSource(o.Workload.genOptions(p, i, n), p, o.Workload, 0, i == 0)
		if err == nil {
			pd.src.toCheckpoint = o.Verify
		}
		if err != nil {
			return d, err
		}
		pd.src.start(ctx)
	}
	d.genCPU = make([]float64, n)

	// Fence rows (round 0: their creation) before anything else.
	if err := d.produceFences(ctx, 0); err != nil {
		return d, err
	}

	if err := d.start(d.cfg); err != nil {
		return d, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.pollConsumed(rctx)
	}()
	return d, nil
}

// start starts o.Instances instances of the job cfg, each with its own
// state directory under the driver's, instance id, registry and sink.
func (d *kafkaDriver) start(cfg *config.Config) error {
	n := max(d.o.Instances, 1)
	views := make([]sink.Sink, n) // per instance: nil for d.inner
	if n > 1 && d.inner != nil {
		v, ok := d.inner.(*verifySink)
		for i := range views {
			if ok {
				views[i], ok = v.view()
			}
		}
		if !ok {
			return errors.New("cdcjoin: bench: --instances > 1 works with the null sink only")
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := 0; i < n; i++ {
		c := *cfg
		c.Kafka.InstanceID = fmt.Sprintf("%s-%d", cfg.Kafka.InstanceID, i)
		c.State.Dir = filepath.Join(cfg.State.Dir, fmt.Sprint("instance-", i))
		inner := d.inner
		if views[i] != nil {
			inner = views[i]
		}
		if inner == nil {
			inner = NewNullSink(cfg.OutputNames())
		}
		r := &benchRun{done: make(chan struct{}), reg: prometheus.NewRegistry(),
			ps: &probeSink{inner: inner, p: d.pr, out: &d.smp.out, fences: d.fs, hot: d.hot}}
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		go func() { // owned by the driver: stopped by stop (or close), which waits for done
			defer close(r.done)
			r.err = kafkarun.Run(ctx, &c, kafkarun.Options{Sink: r.ps, Logger: log.With("instance", i), Registry: r.reg})
		}()
		d.runs = append(d.runs, r)
	}
	return nil
}

// stop stops the instances (they drain and commit) and returns the first
// error of a Run.
func (d *kafkaDriver) stop() error {
	d.mu.Lock()
	runs := d.runs
	d.runs = nil
	d.mu.Unlock()
	var err error
	for _, r := range runs {
		r.cancel()
	}
	for _, r := range runs {
		<-r.done
		if r.err != nil && err == nil {
			err = r.err
		}
	}
	return err
}

// registries returns the running instances' metrics.
func (d *kafkaDriver) registries() []*prometheus.Registry {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*prometheus.Registry, len(d.runs))
	for i, r := range d.runs {
		out[i] = r.reg
	}
	return out
}

// clickhouseExtra is the job's clickhouse section when the ClickHouse sink
// is used (the sink itself is opened by runPoint).
func clickhouseExtra(o Options) string {
	if o.ClickHouse == "" {
		return ""
	}
	return clickhouseYAML(o.ClickHouse)
}

func createTopics(ctx context.Context, brokers []string, parts int32, topics ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("cdcjoin: bench: kafka admin: %w", err)
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).CreateTopics(ctx, parts, -1, nil, topics...)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		return fmt.Errorf("cdcjoin: bench: create topics %v: %w", topics, err)
	}
	return nil
}

// pollConsumed copies the keying stage's consumed-record counter into the
// sampler's input counter every sample period (the timeline's input rate
// is what the pipeline consumed, not what was produced).
func (d *kafkaDriver) pollConsumed(ctx context.Context) {
	t := time.NewTicker(sampleEvery / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// Instances restarted between phases start counting from
			// zero: keep the largest total.
			if sum := d.metricSum("cdcjoin_keying_events_total"); uint64(sum) > d.smp.in.Load() {
				d.smp.in.Store(uint64(sum))
			}
		}
	}
}

// metricSum adds up a metric's values (counters and gauges) over the
// running instances.
func (d *kafkaDriver) metricSum(name string) float64 {
	var sum float64
	for _, reg := range d.registries() {
		mfs, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func (d *kafkaDriver) tables() []cdcgen.Tables {
	out := make([]cdcgen.Tables, len(d.prods))
	for i, pd := range d.prods {
		out[i] = pd.src.gen.Tables()
	}
	return out
}

func (d *kafkaDriver) close() error {
	err := d.stop()
	if d.cancel != nil {
		d.cancel()
	}
	d.wg.Wait()
	for _, pd := range d.prods {
		if pd.src != nil {
			pd.src.close()
		}
		pd.cl.Close()
	}
	if d.cl != nil {
		d.cl.Close()
	}
	if d.inner != nil {
		if cerr := d.inner.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// fenceParent returns F(s,p): the id of a parent that hashes to keyed
// partition p, unique to source partition s.
func fenceParent(s, p int, keyedParts int32) int64 {
	id := fenceParent0 + int64(s)<<24 + int64(p)<<16
	for {
		if keyedlog.Partition(row.AppendKey(nil, []row.Value{row.Int(id)}), keyedParts) == int32(p) {
			return id
		}
		id++
	}
}

func fenceChild(s, p, k int) int64 { return fenceChild0 + int64(s*k+p) }

// produceFences writes fence round r (0: creation) with producer 0's
// client and waits for the brokers' acknowledgement.
func (d *kafkaDriver) produceFences(ctx context.Context, r int) error {
	cl := d.prods[0].cl
	k := int(d.parts)
	var recs []*kgo.Record
	ts := time.Now()
	op := byte('u')
	if r == 0 {
		op = 'r'
	}
	for s := 0; s < k; s++ {
		for p := 0; p < k; p++ {
			fp := fenceParent(s, p, d.parts)
			key, val := d.syn.user(op, fp, fmt.Sprintf("F%d", r), "Fence", ts.UnixMilli())
			recs = append(recs, &kgo.Record{Topic: d.parentTopic, Partition: int32(s), Key: clone(key), Value: clone(val), Timestamp: ts})
			key, val = d.syn.domain(op, fenceChild(s, p, k), fp, fmt.Sprintf("fence-%d", r), ts.UnixMilli())
			recs = append(recs, &kgo.Record{Topic: d.childTopic, Partition: int32(s), Key: clone(key), Value: clone(val), Timestamp: ts})
		}
	}
	if r == 0 {
		// Creation: the parents first, so the children join at once.
		var ps, cs []*kgo.Record
		for _, x := range recs {
			if x.Topic == d.parentTopic {
				ps = append(ps, x)
			} else {
				cs = append(cs, x)
			}
		}
		recs = append(ps, cs...)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("cdcjoin: bench: produce fences: %w", err)
	}
	return nil
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func (d *kafkaDriver) phase(ctx context.Context, idx int, name string, req phaseReq, rate float64) (Phase, error) {
	ph := Phase{Name: name, TargetRate: rate}
	n := len(d.prods)
	for _, pd := range d.prods {
		r := req
		total := req.n
		if r.kind == phaseStorm {
			total = int64(d.o.Workload.StormGap)
		}
		if r.kind == phaseCDC || r.kind == phaseStorm {
			// Split the records (storm: the gap between renames)
			// over the producers.
			r.n = total / int64(n)
			if pd.i == n-1 {
				r.n = total - r.n*int64(n-1)
			}
			if r.kind == phaseStorm {
				r.n = max(r.n, 1)
			}
		}
		select {
		case pd.src.reqs <- r:
		case <-ctx.Done():
			return ph, ctx.Err()
		}
	}
	if req.kind == phaseStorm {
		d.storms++
		d.hot.watch(stormName(d.storms * d.o.Workload.StormRenames))
	}
	m := beginPhase(d.smp, name, expected(req, d.p, d.o.Workload), sum(d.genCPU))
	t0 := time.Now()

	type result struct {
		events, probes, bytes int64
		err                   error
	}
	res := make([]result, n)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i, pd := range d.prods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r result
			r.events, r.probes, r.bytes, d.genCPU[i], r.err = d.produce(pctx, pd, idx, t0, rate/float64(n))
			if r.err != nil {
				cancel()
			}
			res[i] = r
		}()
	}
	wg.Wait()
	for _, r := range res {
		if r.err != nil {
			return ph, r.err
		}
		ph.Events += r.events
		ph.Probes += r.probes
		ph.InputBytes += r.bytes
	}
	d.round++
	if err := d.produceFences(ctx, d.round); err != nil {
		return ph, err
	}
	if err := d.waitFences(ctx, d.round); err != nil {
		return ph, err
	}
	if req.kind == phaseStorm {
		if err := d.waitHot(ctx); err != nil {
			return ph, err
		}
	}
	m.end(&ph, d.smp, d.pr, idx, sum(d.genCPU))
	return ph, nil
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// produce sends producer pd's records of the current phase (paced at rate
// records/s when rate > 0), with a latency probe every ProbeEvery records,
// and waits until the brokers acknowledged them. It returns the records,
// probes and input bytes sent and the generator's cumulative CPU seconds.
func (d *kafkaDriver) produce(ctx context.Context, pd *producer, idx int, t0 time.Time, rate float64) (events, probes, bytes int64, genCPU float64, err error) {
	var mu sync.Mutex
	var first error
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
	}
	probePart := int32(pd.i) % d.parts
	for {
		var b *batch
		select {
		case b = <-pd.src.out:
		case <-ctx.Done():
			return events, probes, bytes, genCPU, ctx.Err()
		}
		// The batch is not recycled: its arena backs the records until
		// the brokers acknowledge them.
		for k := range b.recs {
			r := &b.recs[k]
			due := pace(t0, events, rate)
			topic := d.parentTopic
			if r.topic == cdcgen.DefaultChildTopic {
				topic = d.childTopic
			}
			pd.cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: r.partition, Key: r.key, Value: r.val, Timestamp: time.Now()}, promise)
			events++
			bytes += int64(len(r.key) + len(r.val))
			if events%int64(d.o.ProbeEvery) == 0 {
				sent := time.Now()
				if rate > 0 {
					sent = due // from the scheduled time: no coordinated omission
				}
				id, name := d.pr.next(sent, idx)
				k, v := pd.syn.domain('c', id, probeUserID, name, sent.UnixMilli())
				pd.cl.Produce(ctx, &kgo.Record{Topic: d.childTopic, Partition: probePart, Key: clone(k), Value: clone(v), Timestamp: sent}, promise)
				probes++
			}
		}
		genCPU = b.genCPU
		if b.last {
			break
		}
	}
	if err := pd.cl.Flush(ctx); err != nil {
		return events, probes, bytes, genCPU, fmt.Errorf("cdcjoin: bench: producer %d: flush: %w", pd.i, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if first != nil {
		return events, probes, bytes, genCPU, fmt.Errorf("cdcjoin: bench: producer %d: %w", pd.i, first)
	}
	return events, probes, bytes, genCPU, nil
}

// waitFences waits until the sink acknowledged fence round r, the runtime
// stopped (its error) or ctx ended.
func (d *kafkaDriver) waitFences(ctx context.Context, r int) error {
	return d.waitFor(ctx, func() bool { return d.fs.reached(r) })
}

// waitFor polls done until it holds, an instance stopped (its error) or
// ctx ended.
func (d *kafkaDriver) waitFor(ctx context.Context, done func() bool) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !done() {
		d.mu.Lock()
		runs := d.runs
		d.mu.Unlock()
		for _, r := range runs {
			select {
			case <-r.done:
				if r.err != nil {
					return r.err
				}
				return errors.New("cdcjoin: bench: the runtime stopped before the phase completed")
			default:
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// measureState records the disk usage of the runtime's state directory
// (all keyed partitions' pebble stores, WAL included: the runtime owns the
// stores, so memtables cannot be flushed first), split between the sides in
// proportion to the runtime's per-keyspace state metrics, and at the end
// pebble's write amplification (averaged over the partitions, weighted by
// their size) and block cache hit rate from the same metrics.
func (d *kafkaDriver) measureState(pt *Point, final bool) error {
	n, err := duBytes(d.stateDir)
	if err != nil {
		return err
	}
	ss, err := gatherState(d.registries())
	if err != nil {
		return err
	}
	if final {
		pt.FinalStateBytes = n
		pt.WriteAmp = ss.writeAmp
		if h := ss.hits + ss.misses; h > 0 {
			pt.BlockCacheHitRate = ss.hits / h
		}
		return nil
	}
	pt.StateBytes = n
	parents, children := pt.Users+2, pt.Domains+pt.HotChildren
	if rows := parents + children; rows > 0 {
		pt.StateBytesPerRow = float64(n) / float64(rows)
		pt.ParentStateBytesPerRow, pt.ChildStateBytesPerRow = pt.StateBytesPerRow, pt.StateBytesPerRow
	}
	if sum := ss.parent + ss.child; sum > 0 && parents > 0 && children > 0 {
		pt.ParentStateBytesPerRow = float64(n) * ss.parent / sum / float64(parents)
		pt.ChildStateBytesPerRow = float64(n) * ss.child / sum / float64(children)
	}
	return nil
}

// stateFigures sums the runtime's cdcjoin_state_* metrics over partitions.
type stateFigures struct {
	parent, child float64 // keyspace bytes (child includes the child index)
	writeAmp      float64 // weighted by partition state bytes
	hits, misses  float64 // block cache
}

func gatherState(regs []*prometheus.Registry) (stateFigures, error) {
	var f stateFigures
	var mfs []*dto.MetricFamily
	for _, g := range regs {
		m, err := g.Gather()
		if err != nil {
			return f, fmt.Errorf("cdcjoin: bench: gather state metrics: %w", err)
		}
		mfs = append(mfs, m...)
	}
	bytesOf := map[string]float64{} // partition → state bytes
	amps := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var part, ks string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "partition":
					part = l.GetValue()
				case "keyspace":
					ks = l.GetValue()
				}
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			switch mf.GetName() {
			case "cdcjoin_state_keyspace_bytes":
				bytesOf[part] += v
				switch ks {
				case "parent":
					f.parent += v
				case "child", "child_index":
					f.child += v
				}
			case "cdcjoin_state_write_amplification":
				amps[part] = v
			case "cdcjoin_state_block_cache_hits_total":
				f.hits += v
			case "cdcjoin_state_block_cache_misses_total":
				f.misses += v
			}
		}
	}
	var total float64
	for p, b := range bytesOf {
		f.writeAmp += amps[p] * b
		total += b
	}
	if total > 0 {
		f.writeAmp /= total
	}
	return f, nil
}

// duBytes sums the sizes of the regular files under dir.
func duBytes(dir string) (uint64, error) {
	var n uint64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a file removed by a compaction meanwhile
			}
			return err
		}
		if e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				n += uint64(fi.Size())
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("cdcjoin: bench: state size: %w", err)
	}
	return n, nil
}

// fences tracks, per fence child, the highest rename round (firstname
// "F<r>") and update round (domain_name "fence-<r>") the sink has
// acknowledged. Safe for concurrent use.
type fences struct {
	mu     sync.Mutex
	k      int
	parent []int
	child  []int
}

type fenceSeen struct {
	idx           int
	parent, child int
}

func newFences(sourceParts, keyedParts int) *fences {
	n := sourceParts * keyedParts
	return &fences{k: keyedParts, parent: make([]int, n), child: make([]int, n)}
}

// seen reports whether c is a fence row and, for a fence update, what to
// apply once the sink that got it has flushed (ok).
func (f *fences) seen(c *row.Change) (fs fenceSeen, fence, ok bool) {
	ck := c.ChildKey
	if len(ck) != 1 || ck[0].Kind != row.KindInt || ck[0].Int < fenceChild0 || ck[0].Int >= fenceChild0+int64(len(f.parent)) {
		return fs, false, false
	}
	if c.Op != row.Upsert || len(c.Values) < 5 {
		return fs, true, false
	}
	return fenceSeen{idx: int(ck[0].Int - fenceChild0), parent: roundOf(c.Values[1].Str, "F"), child: roundOf(c.Values[4].Str, "fence-")}, true, true
}

// acked applies fence changes a sink has flushed.
func (f *fences) acked(seen []fenceSeen) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range seen {
		f.parent[s.idx] = max(f.parent[s.idx], s.parent)
		f.child[s.idx] = max(f.child[s.idx], s.child)
	}
}

// reached reports whether every fence row shows round r on both sides.
func (f *fences) reached(r int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.parent {
		if f.parent[i] < r || f.child[i] < r {
			return false
		}
	}
	return true
}

func roundOf(s, prefix string) int {
	if !strings.HasPrefix(s, prefix) {
		return -1
	}
	n := 0
	for _, c := range s[len(prefix):] {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}
