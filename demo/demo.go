// Package demo is `cdcjoin demo`: the quick start with nothing to install.
// It starts an in-process Kafka (kfake), loads the users/domains example as
// Debezium change events, runs the real runtime (kafkarun.Run, the same code
// as `cdcjoin run`), then plays a short scripted change stream and prints
// the joined table after each step together with the upserts and
// retractions that step caused.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/kafkarun"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
)

// Options configure the demo. The zero value is valid.
type Options struct {
	// Sink, if set, also receives every change (e.g. a ClickHouse sink);
	// the demo flushes it with its own and does not close it.
	Sink sink.Sink
	// ClickHouseAddr, if set (host:port, native protocol), also writes the
	// join into ClickHouse (database cdcjoin_demo, table user_domains, view
	// user_domains_current), with a sink the demo opens and closes itself.
	ClickHouseAddr string
	// StateDir holds the join state (default: a temporary directory,
	// removed on return).
	StateDir string
	// Logger receives the runtime's logs (default: discarded).
	Logger *slog.Logger
	// StepTimeout bounds the wait for each step's changes (default 30s).
	StepTimeout time.Duration
}

const jobYAML = `name: user_domains
parent: {topic: dbserver1.public.users, key: id}
child:  {topic: dbserver1.public.domains, key: id, parent_key: user_id}
join: inner
select: parent.id AS user_id, parent.firstname, parent.lastname, child.id AS domain_id, child.domain_name
state: {dir: %q, sync: false}
kafka: {brokers: [%q], keyed_partitions: 1, session_timeout: 6s, commit_interval: 100ms}
`

// step is one scripted change: a SQL statement, what Debezium sends for it,
// and how it changes the demo's copy of the tables.
type step struct {
	sql   string
	apply func(d *db) []*kgo.Record
}

// Run plays the demo, writing to w. It returns nil when every step showed
// the expected joined table; ctx cancels it.
func Run(ctx context.Context, w io.Writer, opts Options) error {
	if opts.StepTimeout == 0 {
		opts.StepTimeout = 30 * time.Second
	}
	if opts.StateDir == "" {
		dir, err := os.MkdirTemp("", "cdcjoin-demo-")
		if err != nil {
			return fmt.Errorf("cdcjoin: demo: %w", err)
		}
		defer os.RemoveAll(dir)
		opts.StateDir = dir
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, usersTopic, domainsTopic),
		kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		return fmt.Errorf("cdcjoin: demo: start in-process Kafka: %w", err)
	}
	defer cluster.Close()
	broker := cluster.ListenAddrs()[0]
	cfg, err := config.Parse([]byte(fmt.Sprintf(jobYAML, opts.StateDir, broker)), "demo.yaml")
	if err != nil {
		return fmt.Errorf("cdcjoin: demo: %w", err)
	}
	if opts.ClickHouseAddr != "" && opts.Sink == nil {
		chCfg, err := cfg.WithClickHouse(opts.ClickHouseAddr)
		if err != nil {
			return fmt.Errorf("cdcjoin: demo: %w", err)
		}
		chCfg.ClickHouse.Database = "cdcjoin_demo"
		ch, err := clickhouse.Open(ctx, chCfg, clickhouse.Options{Recreate: true})
		if err != nil {
			return fmt.Errorf("cdcjoin: demo: %w", err)
		}
		defer ch.Close()
		opts.Sink = ch
		defer fmt.Fprintf(w, "ClickHouse (%[2]s): SELECT * FROM cdcjoin_demo.%[1]s shows the same join\n",
			clickhouse.ViewName(chCfg.ClickHouse), opts.ClickHouseAddr)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return fmt.Errorf("cdcjoin: demo: %w", err)
	}
	defer prod.Close()

	col := &collector{rows: map[string][]string{}, extra: opts.Sink}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- kafkarun.Run(rctx, cfg, kafkarun.Options{Sink: col, Logger: opts.Logger})
	}()
	stop := func() error {
		cancel()
		return <-done
	}

	fmt.Fprintf(w, "cdcjoin demo: in-process Kafka, job %s\n  SELECT %s\n  FROM users u JOIN domains d ON d.user_id = u.id\n",
		cfg.Name, "u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name")
	d := newDB()
	for i, s := range script() {
		recs := s.apply(d)
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			stop()
			return fmt.Errorf("cdcjoin: demo: produce: %w", err)
		}
		fmt.Fprintf(w, "\n== %d. %s\n", i, s.sql)
		changes, err := col.await(ctx, d.join(), opts.StepTimeout, done)
		if err != nil {
			stop()
			return err
		}
		printChanges(w, changes)
		printTable(w, col.table())
	}
	if err := stop(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\ndone: every step matched the expected join.")
	return nil
}

// script is the scripted change stream, starting with the snapshot.
func script() []step {
	return []step{
		{"snapshot: 3 users, 4 domains", func(d *db) []*kgo.Record {
			var out []*kgo.Record
			for _, u := range []user{{1, "Egor", "Myasnik"}, {2, "Pavel", "Hvastun"}, {3, "Mitya", "Volk"}} {
				out = append(out, d.putUser(u, 'r'))
			}
			for _, x := range []domain{{1, 1, "Approval"}, {2, 1, "Rejection"}, {3, 1, "Stoppage"}, {4, 3, "Cancellation"}} {
				out = append(out, d.putDomain(x, 'r'))
			}
			return out
		}},
		{"UPDATE users SET lastname = 'Myasnikov' WHERE id = 1", func(d *db) []*kgo.Record {
			u := d.users[1]
			u.lastname = "Myasnikov"
			return []*kgo.Record{d.putUser(u, 'u')}
		}},
		{"UPDATE domains SET user_id = 2 WHERE id = 3   -- move Stoppage to Pavel (no before image)", func(d *db) []*kgo.Record {
			x := d.domains[3]
			x.userID = 2
			return []*kgo.Record{d.putDomain(x, 'u')}
		}},
		{"DELETE FROM users WHERE id = 3", func(d *db) []*kgo.Record {
			return d.deleteUser(3)
		}},
		{"INSERT INTO domains VALUES (5, 2, 'Renewal')", func(d *db) []*kgo.Record {
			return []*kgo.Record{d.putDomain(domain{5, 2, "Renewal"}, 'c')}
		}},
	}
}

// db is the demo's copy of the source tables and their encoders.
type db struct {
	users         map[int64]user
	domains       map[int64]domain
	usersE, domsE *encoder
}

func newDB() *db {
	return &db{
		users: map[int64]user{}, domains: map[int64]domain{},
		usersE: &encoder{topic: usersTopic, table: "users", cols: usersCols, lsn: 1000, tsMs: 1700000000000},
		domsE:  &encoder{topic: domainsTopic, table: "domains", cols: domainsCols, lsn: 1000, tsMs: 1700000000000},
	}
}

// putUser records an insert/snapshot/update of u (users: REPLICA IDENTITY
// FULL, so updates carry the before image).
func (d *db) putUser(u user, op byte) *kgo.Record {
	var before tableRow
	if old, ok := d.users[u.id]; ok && op == 'u' {
		before = old.row()
	}
	d.users[u.id] = u
	return &kgo.Record{Topic: usersTopic, Key: d.usersE.key(u.id), Value: d.usersE.value(op, before, u.row(), op == 'r')}
}

// putDomain records an insert/snapshot/update of x (domains: REPLICA
// IDENTITY DEFAULT, so updates have no before image).
func (d *db) putDomain(x domain, op byte) *kgo.Record {
	d.domains[x.id] = x
	return &kgo.Record{Topic: domainsTopic, Key: d.domsE.key(x.id), Value: d.domsE.value(op, nil, x.row(), op == 'r')}
}

// deleteUser records a delete and its tombstone.
func (d *db) deleteUser(id int64) []*kgo.Record {
	old := d.users[id]
	delete(d.users, id)
	k := d.usersE.key(id)
	return []*kgo.Record{
		{Topic: usersTopic, Key: k, Value: d.usersE.value('d', old.row(), nil, false)},
		{Topic: usersTopic, Key: k},
	}
}

// join is the expected inner join, rendered like the collector's table.
func (d *db) join() map[string][]string {
	out := map[string][]string{}
	for _, x := range d.domains {
		u, ok := d.users[x.userID]
		if !ok {
			continue
		}
		vals := []string{fmt.Sprint(u.id), u.firstname, u.lastname, fmt.Sprint(x.id), x.name}
		out[rowKey(vals[0], vals[3])] = vals
	}
	return out
}

func rowKey(parent, child string) string { return fmt.Sprintf("%08s/%08s", parent, child) }

// collector is the demo's sink: the joined table as a ReplacingMergeTree
// with FINAL would show it, plus the changes flushed since the last step.
// Safe for concurrent use.
type collector struct {
	mu      sync.Mutex
	pending []row.Change
	rows    map[string][]string
	vers    map[string]uint64
	changes []string
	extra   sink.Sink
}

func (c *collector) Write(ctx context.Context, cs []row.Change) error {
	if c.extra != nil {
		if err := c.extra.Write(ctx, cs); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range cs {
		cp := ch
		cp.ParentKey = slices.Clone(ch.ParentKey)
		cp.ChildKey = slices.Clone(ch.ChildKey)
		cp.Values = slices.Clone(ch.Values)
		cp.Prev = nil
		c.pending = append(c.pending, cp)
	}
	return nil
}

func (c *collector) Flush(ctx context.Context) error {
	if c.extra != nil {
		if err := c.extra.Flush(ctx); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.vers == nil {
		c.vers = map[string]uint64{}
	}
	for _, ch := range c.pending {
		vals := make([]string, len(ch.Values))
		for i, v := range ch.Values {
			vals[i] = v.Text()
			if v.IsNull() {
				vals[i] = "NULL"
			}
		}
		child := "NULL"
		if ch.ChildKey != nil {
			child = ch.ChildKey[0].Text()
		}
		k := rowKey(ch.ParentKey[0].Text(), child)
		if ch.Version < c.vers[k] {
			continue // an older version loses, as in ReplacingMergeTree
		}
		c.vers[k] = ch.Version
		sign := "+ upsert "
		if ch.Op == row.Retract {
			sign = "- retract"
			delete(c.rows, k)
		} else {
			c.rows[k] = vals
		}
		c.changes = append(c.changes, k+"\x00"+sign+"  "+strings.Join(vals, " | "))
	}
	c.pending = c.pending[:0]
	return nil
}

func (c *collector) Close() error { return nil }

func (c *collector) table() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.rows))
	for k := range c.rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([][]string, len(keys))
	for i, k := range keys {
		out[i] = c.rows[k]
	}
	return out
}

// await waits until the table equals want and returns the changes flushed
// meanwhile, in row-key order.
func (c *collector) await(ctx context.Context, want map[string][]string, timeout time.Duration, done <-chan error) ([]string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		equal := len(c.rows) == len(want)
		for k, v := range want {
			if !slices.Equal(c.rows[k], v) {
				equal = false
				break
			}
		}
		var out []string
		if equal {
			out, c.changes = c.changes, nil
		}
		c.mu.Unlock()
		if equal {
			slices.Sort(out)
			for i, s := range out {
				_, out[i], _ = strings.Cut(s, "\x00")
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-done:
			if err == nil {
				err = errors.New("stopped")
			}
			return nil, fmt.Errorf("cdcjoin: demo: the runtime stopped: %w", err)
		case <-deadline.C:
			return nil, fmt.Errorf("cdcjoin: demo: the joined table did not reach the expected state within %v", timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func printChanges(w io.Writer, changes []string) {
	fmt.Fprintf(w, "changes (%d):\n", len(changes))
	for _, c := range changes {
		fmt.Fprintf(w, "  %s\n", c)
	}
}

func printTable(w io.Writer, rows [][]string) {
	fmt.Fprintf(w, "joined table (%d rows):\n", len(rows))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  user_id\tfirstname\tlastname\tdomain_id\tdomain_name")
	for _, r := range rows {
		fmt.Fprintln(tw, "  "+strings.Join(r, "\t"))
	}
	tw.Flush()
}
