package clickhouse

import (
	"context"
	"fmt"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/cdcjoin/cdcjoin/config"
)

// Changing a running job without downtime: the new job (its own name, so
// its own state, internal topics, groups and table) builds its table next
// to the old one; queries go to a live view that names neither job. Once
// the new job has caught up, the view is pointed at the new table in one
// atomic step, and the old job is stopped.
//
// The swap, per server:
//   - current servers (21.3+): CREATE OR REPLACE VIEW, atomic;
//   - older servers (18.16): the new definition is created under a scratch
//     name, then one RENAME TABLE renames the live view away and the new one
//     into its place (both renames in one statement, under the DDL lock: a
//     query resolves the name to the old view or to the new one).
// Either way a query of the view reads one complete table: the old job's
// or the new job's, never a partial or an empty one.

// hasReplaceView reports CREATE OR REPLACE VIEW (21.3+).
func (s Server) hasReplaceView() bool { return s.atLeast(21, 3) }

// SwitchStatements returns the statements that point the live view db.view
// (cfg's database) at cfg's table on server srv; exists says whether the
// view exists already. cfg must be in upsert mode.
func SwitchStatements(cfg *config.Config, view string, srv Server, exists bool) ([]string, error) {
	c := cfg.ClickHouse
	if c == nil || c.Mode != config.ModeUpsert {
		return nil, fmt.Errorf("cdcjoin: clickhouse: a live view switch needs a clickhouse section in upsert mode")
	}
	if view == c.Table || view == ViewName(c) {
		return nil, fmt.Errorf("cdcjoin: clickhouse: the live view %q must not be the job's table or its %s view", view, ViewName(c))
	}
	db := quoteIdent(c.Database)
	live := db + "." + quoteIdent(view)
	q := liveSelect(cfg)
	switch {
	case !exists:
		return []string{fmt.Sprintf("CREATE VIEW %s AS\n%s", live, q)}, nil
	case srv.hasReplaceView():
		return []string{fmt.Sprintf("CREATE OR REPLACE VIEW %s AS\n%s", live, q)}, nil
	}
	next := db + "." + quoteIdent(view+"_cdcjoin_next")
	prev := db + "." + quoteIdent(view+"_cdcjoin_prev")
	return []string{
		"DROP TABLE IF EXISTS " + next,
		"DROP TABLE IF EXISTS " + prev,
		fmt.Sprintf("CREATE VIEW %s AS\n%s", next, q),
		fmt.Sprintf("RENAME TABLE %s TO %s, %s TO %s", live, prev, next, live),
		"DROP TABLE " + prev,
	}, nil
}

// SwitchView points the live view at cfg's table (creating the view when
// absent) and returns the statements it ran.
func SwitchView(ctx context.Context, cfg *config.Config, view string) ([]string, error) {
	c := cfg.ClickHouse
	if c == nil {
		return nil, fmt.Errorf("cdcjoin: clickhouse: the configuration has no clickhouse section")
	}
	opts := &ch.Options{Addr: c.Addr, Auth: ch.Auth{Database: "default", Username: c.Username, Password: c.Password},
		DialTimeout: 10 * time.Second}
	if c.TLS.Enabled {
		tc, err := c.TLS.ClientConfig()
		if err != nil {
			return nil, err
		}
		opts.TLS = tc
	}
	conn, err := ch.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: clickhouse: open %v: %w", c.Addr, err)
	}
	defer conn.Close()
	v, err := conn.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: clickhouse: %w", err)
	}
	srv := Server{Major: int(v.Version.Major), Minor: int(v.Version.Minor)}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ?", c.Database, c.Table).Scan(&n); err != nil {
		return nil, fmt.Errorf("cdcjoin: clickhouse: %w", err)
	}
	if n == 0 {
		return nil, fmt.Errorf("cdcjoin: clickhouse: table %s.%s does not exist: the new job has not written anything yet", c.Database, c.Table)
	}
	var exists uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = ?", c.Database, view).Scan(&exists); err != nil {
		return nil, fmt.Errorf("cdcjoin: clickhouse: %w", err)
	}
	stmts, err := SwitchStatements(cfg, view, srv, exists > 0)
	if err != nil {
		return nil, err
	}
	for _, q := range stmts {
		if err := conn.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("cdcjoin: clickhouse: %s: %w", q, err)
		}
	}
	return stmts, nil
}
