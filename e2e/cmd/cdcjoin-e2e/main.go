// Command cdcjoin-e2e is the real-stack end-to-end test of cdcjoin, run by
// e2e/run.sh (`make e2e`) against the servers of deploy/local/:
//
//  1. prepares a fresh source database (e2e, from schema.sql and
//     types.sql, plus a base load), deletes the e2e topics, groups,
//     ClickHouse tables and state;
//  2. registers a Debezium connector for it (schemas on) and, for typed
//     configs on another topic prefix, a second one with schemas off; starts
//     one `cdcjoin run --config F` per -configs and -type-configs file;
//  3. waits for the snapshots, runs a scripted and a seeded random DML
//     workload on users/domains and the change script of the type tables
//     (types-dml.sql), killing every cdcjoin with SIGKILL in the middle and
//     restarting it;
//  4. waits until cdcjoin has caught up (keying group lag 0 on the source
//     topics, join group committed past the keyed topics' last records);
//  5. compares each config's ClickHouse <table>_current with the same
//     JOIN computed by PostgreSQL, row for row and column for column (the
//     typed join in each column's canonical form, see e2e.TypedColumns);
//  6. runs the negative control (tampers with the last users/domains
//     config's table and the last typed one, and requires the comparison to
//     fail), prints the report.
//
// -plan-configs are jobs written as SQL over users, domains and
// dns_records (multi-stage plans): the connector then captures
// dns_records too, the workload loads and changes records (from a random
// stream of their own), and each such job's table is compared with
// PostgreSQL's answer to the job's own query (and tampered with in the
// negative control).
//
// It exits 0 when every comparison passed and the negative control failed
// as it must; 1 otherwise. Servers come from the CDCJOIN_* environment
// variables written by deploy/local/stack.sh (deploy/local/.run/env).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/e2e"
	"github.com/cdcjoin/cdcjoin/kafkarun"
)

type job struct {
	path  string
	cfg   *config.Config
	proc  *e2e.Process
	src   []string // its source topics
	typed bool     // a join of the type tables (compared in canonical form)
	// plan: the Kafka names of a job written as SQL (a multi-stage plan),
	// compared with PostgreSQL's answer to its query; nil otherwise.
	plan *kafkarun.PlanNames
}

type options struct {
	bin, configs, connector, schema, db, logDir string
	typeConfigs, typesSchema, typesDML          string
	planConfigs                                 string
	seed                                        uint64
	size                                        e2e.Size
	kill, negative                              bool
	timeout                                     time.Duration
	// Avro: the connectors write through the schema registry (Apicurio's
	// AvroConverter, Confluent-compatible), the configs read format avro.
	format, registryScript string
	alter                  string // schema changes applied during the workload
	registryOutage         time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.bin, "cdcjoin", "bin/cdcjoin", "the cdcjoin binary (run as `cdcjoin run --config F`)")
	flag.StringVar(&o.configs, "configs", "deploy/local/e2e-inner.yaml,deploy/local/e2e-left.yaml", "comma-separated cdcjoin configs, each run as its own process")
	flag.StringVar(&o.connector, "connector", "deploy/local/debezium-postgres.json", "Debezium connector file; database, slot, publication and topic prefix are overridden")
	flag.StringVar(&o.schema, "schema", "deploy/local/schema.sql", "schema of the source database")
	flag.StringVar(&o.typeConfigs, "type-configs", "deploy/local/e2e-types-on.yaml,deploy/local/e2e-types-off.yaml",
		"comma-separated cdcjoin configs of the type tables' join (empty: no typed phase); a config whose topic prefix is not the connector's gets a second connector, with schemas off")
	flag.StringVar(&o.planConfigs, "plan-configs", "", "comma-separated cdcjoin configs written as SQL over users, domains and dns_records (multi-stage plans; empty: none)")
	flag.StringVar(&o.typesSchema, "types-schema", "deploy/local/types.sql", "schema and rows of the type tables")
	flag.StringVar(&o.typesDML, "types-dml", "deploy/local/types-dml.sql", "change script of the type tables")
	flag.StringVar(&o.db, "db", "e2e", "source database (dropped and recreated)")
	flag.StringVar(&o.logDir, "logdir", "deploy/local/.run/e2e", "directory for the cdcjoin logs")
	flag.Uint64Var(&o.seed, "seed", 1, "workload seed")
	flag.IntVar(&o.size.BaseUsers, "base-users", e2e.DefaultSize.BaseUsers, "users in the snapshot")
	flag.IntVar(&o.size.BaseDomains, "base-domains", e2e.DefaultSize.BaseDomains, "domains in the snapshot")
	flag.IntVar(&o.size.HotDomains, "hot-domains", e2e.DefaultSize.HotDomains, "domains of the hot user")
	flag.IntVar(&o.size.RandomTxs, "random-txs", e2e.DefaultSize.RandomTxs, "random transactions")
	o.size.ToastBytes = e2e.DefaultSize.ToastBytes
	flag.BoolVar(&o.kill, "kill", true, "kill -9 and restart cdcjoin in the middle of the workload")
	flag.BoolVar(&o.negative, "negative", true, "run the negative control after the comparisons")
	flag.DurationVar(&o.timeout, "timeout", 8*time.Minute, "overall deadline")
	flag.StringVar(&o.alter, "alter", "deploy/local/e2e-alter.sql", "source schema changes (ALTER TABLE and DML) applied after cdcjoin restarted (empty: none; statements on the type tables only when every typed config reads schemas)")
	flag.StringVar(&o.format, "format", "json", "json, or avro: Debezium writes Avro through the schema registry of CDCJOIN_REGISTRY_URL (Apicurio's AvroConverter in Confluent-compatible mode)")
	flag.StringVar(&o.registryScript, "registry-script", "deploy/local/registry.sh", "the registry's control script (-format avro: stopped and started for the outage)")
	flag.DurationVar(&o.registryOutage, "registry-outage", 30*time.Second, "-format avro: how long the registry is down while cdcjoin restarts after the kill (0: no outage)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	err := run(ctx, o)
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("e2e: PASS")
}

func logf(format string, args ...any) {
	fmt.Printf("e2e: %s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func env(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("cdcjoin: e2e: %s is not set (source deploy/local/.run/env)", name)
	}
	return v, nil
}

func run(ctx context.Context, o options) (err error) {
	t0 := time.Now()
	var pgDSN, brokers, connectURL, chAddr string
	for _, v := range []struct {
		dst  *string
		name string
	}{{&pgDSN, "CDCJOIN_POSTGRES_DSN"}, {&brokers, "CDCJOIN_KAFKA_BROKERS"}, {&connectURL, "CDCJOIN_CONNECT_URL"}, {&chAddr, "CDCJOIN_CLICKHOUSE_ADDR"}} {
		if *v.dst, err = env(v.name); err != nil {
			return err
		}
	}
	load := func(p string, typed bool) (*job, error) {
		cfg, err := config.Load(p)
		if err != nil {
			return nil, err
		}
		if err := cfg.ValidateForKafka(); err != nil {
			return nil, err
		}
		if cfg.ClickHouse == nil || cfg.ClickHouse.Mode != config.ModeUpsert {
			return nil, fmt.Errorf("cdcjoin: e2e: %s: needs a clickhouse section in upsert mode", p)
		}
		if cfg.Plan() != nil {
			names := kafkarun.NamesOf(cfg)
			return &job{path: p, cfg: cfg, src: names.Sources, plan: &names}, nil
		}
		return &job{path: p, cfg: cfg, src: []string{cfg.Parent.Topic, cfg.Child.Topic}, typed: typed}, nil
	}
	var jobs, typedJobs []*job
	for _, p := range strings.Split(o.configs, ",") {
		j, err := load(p, false)
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
	}
	src := jobs[0].src
	prefix := strings.TrimSuffix(src[0], ".public.users")
	for _, j := range jobs {
		if j.src[0] != src[0] || j.src[1] != src[1] {
			return fmt.Errorf("cdcjoin: e2e: %s: all configs must read %v", j.path, src)
		}
	}
	if prefix == src[0] {
		return fmt.Errorf("cdcjoin: e2e: parent topic %q is not <prefix>.public.users", src[0])
	}
	// Typed configs read <prefix>.public.type_parents/type_children; a prefix
	// other than the main connector's gets its own connector, schemas off.
	typedPrefixes := map[string]bool{}
	for _, p := range strings.Split(o.typeConfigs, ",") {
		if p == "" {
			continue
		}
		j, err := load(p, true)
		if err != nil {
			return err
		}
		tp := strings.TrimSuffix(j.src[0], ".public.type_parents")
		if tp == j.src[0] || j.src[1] != tp+".public.type_children" {
			return fmt.Errorf("cdcjoin: e2e: %s: topics must be <prefix>.public.type_parents and <prefix>.public.type_children", p)
		}
		typedPrefixes[tp] = true
		typedJobs = append(typedJobs, j)
	}
	var planJobs []*job
	for _, p := range strings.Split(o.planConfigs, ",") {
		if p == "" {
			continue
		}
		j, err := load(p, false)
		if err != nil {
			return err
		}
		if j.plan == nil {
			return fmt.Errorf("cdcjoin: e2e: %s: -plan-configs takes jobs written as SQL that compile to multi-stage plans", p)
		}
		for _, t := range j.src {
			if t != src[0] && t != src[1] && t != prefix+".public.dns_records" {
				return fmt.Errorf("cdcjoin: e2e: %s: reads %s; plan configs read %s, %s and %s.public.dns_records", p, t, src[0], src[1], prefix)
			}
		}
		planJobs = append(planJobs, j)
	}
	allJobs := append(append(append([]*job(nil), jobs...), typedJobs...), planJobs...)
	var typedSrc []string
	for _, j := range typedJobs {
		typedSrc = append(typedSrc, j.src...)
	}

	// --- prepare ---
	adm, err := e2e.NewAdmin(strings.Split(brokers, ","))
	if err != nil {
		return err
	}
	defer adm.Close()
	ch, err := e2e.OpenClickHouse(ctx, chAddr)
	if err != nil {
		return err
	}
	defer ch.Close()
	conn := &e2e.Connect{URL: connectURL}
	names, err := conn.Connectors(ctx)
	if err != nil {
		return err
	}
	for _, n := range names {
		if strings.HasPrefix(n, "cdcjoin-e2e") {
			if err := conn.Unregister(ctx, n); err != nil {
				return err
			}
		}
	}
	if err := e2e.RecreateDatabase(ctx, pgDSN, o.db, o.schema); err != nil {
		return err
	}
	dsn, err := e2e.WithDatabase(pgDSN, o.db)
	if err != nil {
		return err
	}
	pg, err := e2e.OpenPostgres(ctx, dsn)
	if err != nil {
		return err
	}
	defer pg.Close(context.Background())
	if len(typedJobs) > 0 {
		if err := pg.ExecFile(ctx, o.typesSchema); err != nil {
			return err
		}
	}
	var topics, groups, keyedTopics []string
	topics = append(append(topics, src...), typedSrc...)
	for _, j := range allJobs {
		k := &j.cfg.Kafka
		if j.plan != nil {
			topics = append(append(topics, j.plan.Keyed...), j.plan.Index...)
			groups = append(groups, j.plan.Groups...)
			if err := ch.DropTable(ctx, j.cfg.ClickHouse.Database, j.cfg.ClickHouse.Table); err != nil {
				return err
			}
			if err := os.RemoveAll(j.cfg.State.Dir); err != nil {
				return fmt.Errorf("cdcjoin: e2e: %w", err)
			}
			continue
		}
		topics = append(topics, k.KeyedTopic(), k.ChildIndexTopic(), k.ParentIndexTopic())
		if j.cfg.Errors.DLQTopic != "" {
			topics = append(topics, j.cfg.Errors.DLQTopic)
		}
		keyedTopics = append(keyedTopics, k.KeyedTopic())
		groups = append(groups, k.KeyingGroup(), k.JoinGroup())
		if err := ch.DropTable(ctx, j.cfg.ClickHouse.Database, j.cfg.ClickHouse.Table); err != nil {
			return err
		}
		if err := os.RemoveAll(j.cfg.State.Dir); err != nil {
			return fmt.Errorf("cdcjoin: e2e: %w", err)
		}
	}
	if len(planJobs) > 0 {
		topics = append(topics, prefix+".public.dns_records")
	}
	if err := adm.DeleteGroups(ctx, groups...); err != nil {
		return err
	}
	dctx, dcancel := context.WithTimeout(ctx, time.Minute)
	err = adm.DeleteTopics(dctx, topics...)
	dcancel()
	if err != nil {
		return err
	}
	rep := &report{}
	wl := e2e.NewWorkload(o.seed, o.size)
	apply := func(txs ...e2e.Tx) (int64, error) {
		var last int64
		for _, tx := range txs {
			n, txid, err := pg.Apply(ctx, tx)
			if err != nil {
				return 0, err
			}
			rep.sourceRows += n
			rep.sourceTxs++
			last = txid
		}
		return last, nil
	}
	if _, err := apply(wl.BaseLoad()...); err != nil {
		return err
	}
	// The records' statements, only with plan jobs (the other jobs' runs
	// stay what they were).
	records := func(txs []e2e.Tx) []e2e.Tx { return txs }
	if len(planJobs) > 0 {
		if _, err := apply(wl.BaseRecords(o.size.BaseDomains / 2)); err != nil {
			return err
		}
		records = wl.WithRecords
	}
	logf("prepared database %s (base load: %d rows) in %v", o.db, rep.sourceRows, time.Since(t0).Round(time.Millisecond))

	// --- connector and cdcjoin ---
	registryURL := ""
	if o.format == "avro" {
		if registryURL, err = env("CDCJOIN_REGISTRY_URL"); err != nil {
			return err
		}
	}
	w, err := e2e.NewWatcherRegistry(strings.Split(brokers, ","), append(append([]string(nil), src...), typedSrc...), keyedTopics, registryURL)
	if err != nil {
		return err
	}
	defer w.Close()
	pgPort, err := e2e.Port(pgDSN)
	if err != nil {
		return err
	}
	// The main connector (schemas as the worker says: on), and one with
	// schemas off per other typed prefix.
	tables := "public.users,public.domains"
	if len(planJobs) > 0 {
		tables += ",public.dns_records"
	}
	if typedPrefixes[prefix] {
		tables += ",public.type_parents,public.type_children"
	}
	connectors := []map[string]string{{"topic.prefix": prefix, "table.include.list": tables}}
	for tp := range typedPrefixes {
		if tp != prefix {
			connectors = append(connectors, map[string]string{"topic.prefix": tp,
				"table.include.list": "public.type_parents,public.type_children",
				"key.converter":      "org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable": "false",
				"value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "false"})
		}
	}
	if o.format == "avro" {
		native := strings.Replace(registryURL, "/apis/ccompat/v7", "/apis/registry/v2", 1)
		for _, over := range connectors {
			for _, side := range []string{"key", "value"} {
				c := side + ".converter"
				over[c] = "io.apicurio.registry.utils.converter.AvroConverter"
				over[c+".apicurio.registry.url"] = native
				over[c+".apicurio.registry.auto-register"] = "true"
				over[c+".apicurio.registry.find-latest"] = "true"
				over[c+".apicurio.registry.as-confluent"] = "true"
				over[c+".apicurio.registry.use-id"] = "contentId"
				over[c+".apicurio.registry.headers.enabled"] = "false"
			}
		}
	}
	for i, over := range connectors {
		connName := fmt.Sprintf("cdcjoin-e2e-%d-%d", time.Now().UnixNano(), i)
		slot := strings.ReplaceAll("cdcjoin_"+o.db+"_"+over["topic.prefix"], "-", "_")
		over["database.dbname"], over["database.port"], over["slot.name"], over["publication.name"] = o.db, pgPort, slot, slot
		ccfg, err := e2e.ConnectorConfig(o.connector, over)
		if err != nil {
			return err
		}
		if err := conn.Register(ctx, connName, ccfg); err != nil {
			return err
		}
		defer func() {
			uctx, c := context.WithTimeout(context.Background(), 30*time.Second)
			defer c()
			if uerr := conn.Unregister(uctx, connName); uerr != nil {
				logf("warning: %v", uerr)
			}
		}()
		logf("connector %s (topic prefix %s) RUNNING", connName, over["topic.prefix"])
	}
	if err := os.MkdirAll(o.logDir, 0o755); err != nil {
		return fmt.Errorf("cdcjoin: e2e: %w", err)
	}
	smp := newSampler(adm, allJobs)
	sctx, scancel := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Add(1)
	go func() { defer swg.Done(); smp.run(sctx) }()
	defer func() { scancel(); swg.Wait() }()

	alive := func() error {
		for _, j := range allJobs {
			if j.proc == nil {
				continue
			}
			if exited, perr := j.proc.Exited(); exited {
				return fmt.Errorf("cdcjoin: e2e: cdcjoin for %s exited unexpectedly (%v); see %s", j.path, perr, j.proc.Log)
			}
		}
		return w.Err()
	}
	if err := waitFor(ctx, "Debezium snapshot", 3*time.Minute, func() (bool, error) { return w.SnapshotsDone(len(connectors)), alive() }); err != nil {
		return err
	}
	logf("snapshot done at %v", time.Since(t0).Round(time.Millisecond))
	// cdcjoin needs the source topics: start it once they exist.
	for _, j := range allJobs {
		j.proc = &e2e.Process{Bin: o.bin, Config: j.path, Log: filepath.Join(o.logDir, j.cfg.Name+".log")}
		if err := j.proc.Start(); err != nil {
			return err
		}
		logf("started cdcjoin run --config %s (log %s)", j.path, j.proc.Log)
	}
	defer func() {
		for _, j := range allJobs {
			if j.proc == nil {
				continue
			}
			if serr := j.proc.Stop(20 * time.Second); serr != nil && err == nil {
				err = fmt.Errorf("cdcjoin: e2e: %s: exit: %w", j.path, serr)
			}
		}
	}()

	// --- workload ---
	// The type tables' change script runs half before the kill, half while
	// cdcjoin is down.
	var typedTxs []e2e.Tx
	if len(typedJobs) > 0 {
		if typedTxs, err = e2e.Statements(o.typesDML); err != nil {
			return err
		}
	}
	half := len(typedTxs) / 2
	tw := time.Now()
	scripted := wl.Scripted()
	if _, err := apply(scripted...); err != nil {
		return err
	}
	logf("scripted workload: %d transactions", len(scripted))
	if _, err := apply(wl.HotUser()); err != nil {
		return err
	}
	n := o.size.RandomTxs
	if _, err := apply(records(wl.Random(n * 2 / 5))...); err != nil {
		return err
	}
	if _, err := apply(wl.HotRename()); err != nil {
		return err
	}
	if _, err := apply(typedTxs[:half]...); err != nil {
		return err
	}
	if o.kill {
		time.Sleep(300 * time.Millisecond) // let the fan-out start
		for _, j := range allJobs {
			j.proc.Kill()
		}
		rep.killedAt = time.Since(t0)
		logf("kill -9 every cdcjoin")
	}
	if _, err := apply(records(wl.Random(n / 5))...); err != nil {
		return err
	}
	if _, err := apply(typedTxs[half:]...); err != nil {
		return err
	}
	var outage func() error
	if o.kill && o.format == "avro" && o.registryOutage > 0 {
		if outage, err = registryDown(ctx, o, allJobs, rep); err != nil {
			return err
		}
	}
	if o.kill {
		for _, j := range allJobs {
			if err := j.proc.Start(); err != nil {
				return err
			}
		}
		logf("restarted every cdcjoin")
	}
	if outage != nil {
		if err := outage(); err != nil {
			return err
		}
	}
	if o.alter != "" {
		alters, err := e2e.Statements(o.alter)
		if err != nil {
			return err
		}
		// A typed job reading records without a schema declares its
		// types: widening the type tables would need the operator to update
		// them first (README, Source schema changes). Their changes run
		// only when every typed job reads schemas (the Avro pass).
		declared := false
		for _, j := range typedJobs {
			declared = declared || len(j.cfg.Parent.Types) > 0
		}
		var applied []e2e.Tx
		for _, tx := range alters {
			if strings.Contains(tx.Stmts[0].SQL, "type_parents") && (len(typedJobs) == 0 || declared) {
				continue
			}
			applied = append(applied, tx)
		}
		if _, err := apply(applied...); err != nil {
			return err
		}
		logf("schema changes: %d statements of %s", len(applied), o.alter)
	}
	if _, err := apply(records(wl.Random(n - n*2/5 - n/5))...); err != nil {
		return err
	}
	if _, err := apply(wl.HotRename()); err != nil {
		return err
	}
	markerTx, err := apply(wl.Marker(1))
	if err != nil {
		return err
	}
	var typedMarkerTx int64
	if len(typedJobs) > 0 {
		if typedMarkerTx, err = apply(e2e.TypedMarker(1)); err != nil {
			return err
		}
	}
	tEnd := time.Now()
	rep.workload = tEnd.Sub(tw)
	logf("workload done: %d transactions, %d source rows changed, in %v", rep.sourceTxs, rep.sourceRows, rep.workload.Round(time.Millisecond))

	// --- convergence ---
	if err := waitFor(ctx, "end marker in the Debezium topics", 2*time.Minute, func() (bool, error) {
		return w.SawTx(markerTx, src...) && (len(typedJobs) == 0 || w.SawTx(typedMarkerTx, typedSrc...)), alive()
	}); err != nil {
		return err
	}
	logf("Debezium shipped the end marker after %v", time.Since(tEnd).Round(time.Millisecond))
	marks := 1
	nudge := func(j *job) func() error {
		return func() error {
			marks++
			tx := wl.Marker(marks)
			if j.typed {
				tx = e2e.TypedMarker(marks)
			}
			_, err := apply(tx)
			return err
		}
	}
	for _, j := range allJobs {
		if j.plan != nil {
			if err := waitKeyed(ctx, adm, j, alive); err != nil {
				return err
			}
			continue // its stages: compareUntilEqual below
		}
		n, err := waitCaughtUp(ctx, adm, w, j, j.src, alive, nudge(j))
		rep.nudges += n
		if err != nil {
			return err
		}
	}
	var failures []string
	for _, j := range allJobs {
		limit := 30 * time.Second
		if j.plan != nil {
			// No catch-up wait for the stages after the first: the
			// comparison itself waits (on the table, up to limit).
			limit = 3 * time.Minute
		}
		d, err := compareUntilEqual(ctx, pg, ch, j, limit)
		if err != nil {
			return err
		}
		kind := string(j.cfg.Join) + " join"
		if j.plan != nil {
			kind = fmt.Sprintf("SQL, %d stages", len(j.plan.Keyed))
		}
		logf("%s (%s): %s", j.cfg.Name, kind, d.Report(10))
		if !d.Equal() {
			failures = append(failures, j.cfg.Name)
		}
		rep.outputRows = append(rep.outputRows, fmt.Sprintf("%s=%d", j.cfg.Name, d.Want))
	}
	rep.converge = time.Since(tEnd)
	scancel()
	swg.Wait()
	rep.ops = w.Ops()
	rep.peaks = smp.peaks()

	// --- negative control ---
	// The last users/domains job, and the last typed job: one corrupted and
	// one dropped row each must make the comparison fail.
	if o.negative && len(failures) == 0 {
		controls := []*job{jobs[len(jobs)-1]}
		if len(typedJobs) > 0 {
			controls = append(controls, typedJobs[len(typedJobs)-1])
		}
		controls = append(controls, planJobs...)
		for _, j := range controls {
			cols, corrupt := e2e.Columns, "firstname"
			switch {
			case j.typed:
				cols, corrupt = e2e.TypedColumnNames(), "txt"
			case j.plan != nil:
				cols = j.cfg.OutputNames()
			}
			k, err := ch.TamperColumns(ctx, j.cfg.ClickHouse.Database, j.cfg.ClickHouse.Table, cols, corrupt)
			if err != nil {
				return err
			}
			d, err := compare(ctx, pg, ch, j)
			if err != nil {
				return err
			}
			switch {
			case k < 2:
				failures = append(failures, j.cfg.Name+" negative control: fewer than 2 rows to tamper with")
			case d.Equal():
				failures = append(failures, j.cfg.Name+" negative control: comparison PASSED on a tampered table")
			case len(d.Missing) != 2 || len(d.Extra) != 1:
				failures = append(failures, fmt.Sprintf("%s negative control: expected 2 missing and 1 extra row, got %s", j.cfg.Name, d.Report(5)))
			default:
				logf("negative control OK: tampered %s (1 corrupted, 1 dropped row): %s", j.cfg.Name, d.Report(3))
			}
		}
	}
	rep.total = time.Since(t0)
	rep.print()
	if len(failures) > 0 {
		return errors.New("cdcjoin: e2e: " + strings.Join(failures, "; "))
	}
	return nil
}

func waitFor(ctx context.Context, what string, limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cdcjoin: e2e: %s: not reached within %v", what, limit)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cdcjoin: e2e: waiting for %s: %w", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitCaughtUp waits until j's keying group has committed every source
// record and its join group has committed past the last committed record
// of every keyed partition (the join commits a position only after the
// sink accepted its changes, so the sink is then drained).
//
// The join stage commits its position to Kafka after a poll returns, so
// with no new input its last position can stay uncommitted; nudge (a
// source change outside the join's projection) wakes it up. It is called
// at most once a second while only the join group is behind, and its
// count is returned.
func waitCaughtUp(ctx context.Context, adm *e2e.Admin, w *e2e.Watcher, j *job, src []string, alive func() error, nudge func() error) (int, error) {
	k := &j.cfg.Kafka
	var last string
	nudges := 0
	var lastNudge time.Time
	var target map[int32]int64
	err := waitFor(ctx, j.cfg.Name+" caught up", 2*time.Minute, func() (bool, error) {
		if err := alive(); err != nil {
			return false, err
		}
		kl, err := adm.Lag(ctx, k.KeyingGroup(), src...)
		if err != nil {
			return false, err
		}
		if kl.Records > 0 {
			last = fmt.Sprintf("keying lag %d", kl.Records)
			return false, nil
		}
		// The keyed topic's end may be commit markers: the tail read
		// with read_committed tells where its last record is; give the
		// watcher a moment after the keying stage finished.
		if target == nil {
			tail, idle := w.KeyedTail(k.KeyedTopic())
			if idle < time.Second {
				last = "keyed topic still growing"
				return false, nil
			}
			target = tail // fixed from here on: nudges append no-ops
		}
		jl, err := adm.Lag(ctx, k.JoinGroup(), k.KeyedTopic())
		if err != nil {
			return false, err
		}
		for p, end := range target {
			if c := jl.Committed[k.KeyedTopic()][p]; c < end {
				last = fmt.Sprintf("join group at %d of %d on partition %d", c, end, p)
				if time.Since(lastNudge) >= time.Second {
					lastNudge = time.Now()
					nudges++
					return false, nudge()
				}
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != "" {
		return nudges, fmt.Errorf("%w (last: %s)", err, last)
	}
	if err == nil {
		logf("%s caught up (keying lag 0, join group past the keyed topic's last record; %d nudges)", j.cfg.Name, nudges)
	}
	return nudges, err
}

// waitKeyed waits until a plan job's keying group has consumed its source
// topics (lag 0).
func waitKeyed(ctx context.Context, adm *e2e.Admin, j *job, alive func() error) error {
	var last string
	err := waitFor(ctx, j.cfg.Name+" keyed", 2*time.Minute, func() (bool, error) {
		if err := alive(); err != nil {
			return false, err
		}
		kl, err := adm.Lag(ctx, j.cfg.Kafka.KeyingGroup(), j.src...)
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("keying lag %d", kl.Records)
		return kl.Records == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)", err, last)
	}
	logf("%s keyed (keying lag 0)", j.cfg.Name)
	return nil
}

func compare(ctx context.Context, pg *e2e.Postgres, ch *e2e.ClickHouse, j *job) (*e2e.Difference, error) {
	if j.plan != nil {
		names := j.cfg.OutputNames()
		want, err := pg.QueryText(ctx, j.cfg.Query, names)
		if err != nil {
			return nil, err
		}
		got, err := ch.RowsOf(ctx, j.cfg.ClickHouse.Database, j.cfg.ClickHouse.Table+"_current", names)
		if err != nil {
			return nil, err
		}
		return e2e.Diff(want, got), nil
	}
	read, oracle := ch.Rows, pg.Join
	if j.typed {
		read, oracle = ch.TypedRows, pg.TypedJoin
	}
	want, err := oracle(ctx, j.cfg.Join == config.Left)
	if err != nil {
		return nil, err
	}
	got, err := read(ctx, j.cfg.ClickHouse.Database, j.cfg.ClickHouse.Table+"_current")
	if err != nil {
		return nil, err
	}
	return e2e.Diff(want, got), nil
}

// compareUntilEqual compares, retrying for up to limit while different
// (ClickHouse may apply an accepted insert a moment later).
func compareUntilEqual(ctx context.Context, pg *e2e.Postgres, ch *e2e.ClickHouse, j *job, limit time.Duration) (*e2e.Difference, error) {
	deadline := time.Now().Add(limit)
	for {
		d, err := compare(ctx, pg, ch, j)
		if err != nil || d.Equal() || time.Now().After(deadline) {
			return d, err
		}
		select {
		case <-ctx.Done():
			return d, nil
		case <-time.After(time.Second):
		}
	}
}

// registryDown stops the schema registry (with every cdcjoin killed, so
// the restarted ones have no schema cached) and returns the rest of the
// outage, to run once cdcjoin was restarted: it requires every job's
// /readyz to say that it waits for the registry, keeps the registry down
// for -registry-outage, and starts it again.
func registryDown(ctx context.Context, o options, jobs []*job, rep *report) (func() error, error) {
	if out, err := exec.CommandContext(ctx, o.registryScript, "down").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: %s down: %v: %s", o.registryScript, err, out)
	}
	down := time.Now()
	logf("schema registry stopped")
	return func() error {
		for _, j := range jobs {
			addr := j.cfg.Kafka.MetricsAddr
			if addr == "" {
				continue
			}
			var reason string
			err := waitFor(ctx, "/readyz of "+j.cfg.Name+" naming the registry", o.registryOutage+time.Minute, func() (bool, error) {
				code, body, err := e2e.Probe(ctx, addr, "/readyz")
				if err != nil {
					return false, nil // not listening yet
				}
				reason = body
				return code == http.StatusServiceUnavailable && strings.Contains(body, "schema registry"), nil
			})
			if err != nil {
				return fmt.Errorf("%w (last /readyz: %q)", err, reason)
			}
			logf("%s /readyz while the registry is down: %s", j.cfg.Name, strings.TrimSpace(reason))
			rep.registryReasons = append(rep.registryReasons, j.cfg.Name+": "+strings.TrimSpace(reason))
		}
		if d := o.registryOutage - time.Since(down); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
		out, err := exec.CommandContext(ctx, o.registryScript, "up").CombinedOutput()
		if err != nil {
			return fmt.Errorf("cdcjoin: e2e: %s up: %v: %s", o.registryScript, err, out)
		}
		rep.registryOutage = time.Since(down)
		logf("schema registry up again after %v", rep.registryOutage.Round(time.Second))
		return nil
	}, nil
}
