package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Postgres is a connection to the e2e source database. Not safe for
// concurrent use (one pgx connection).
type Postgres struct {
	conn *pgx.Conn
}

// WithDatabase returns dsn (a postgres:// URL) naming database db instead.
func WithDatabase(dsn, db string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("cdcjoin: e2e: postgres dsn: %w", err)
	}
	u.Path = "/" + db
	return u.String(), nil
}

// RecreateDatabase drops database db (terminating its sessions and dropping
// its inactive replication slots first) and creates it again from the
// schema file, connecting through adminDSN (any other database of the
// server). A slot still in use by a connector makes it fail: unregister
// the connector first.
func RecreateDatabase(ctx context.Context, adminDSN, db, schemaFile string) error {
	schema, err := os.ReadFile(schemaFile)
	if err != nil {
		return fmt.Errorf("cdcjoin: e2e: %w", err)
	}
	admin, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return fmt.Errorf("cdcjoin: e2e: connect %s: %w", redact(adminDSN), err)
	}
	defer admin.Close(ctx)
	for _, q := range []string{
		`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
		`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active`,
	} {
		if _, err := admin.Exec(ctx, q, db); err != nil {
			return fmt.Errorf("cdcjoin: e2e: prepare drop of %s: %w", db, err)
		}
	}
	ident := pgx.Identifier{db}.Sanitize()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + ident, "CREATE DATABASE " + ident} {
		if _, err := admin.Exec(ctx, q); err != nil {
			return fmt.Errorf("cdcjoin: e2e: %s: %w", q, err)
		}
	}
	dsn, err := WithDatabase(adminDSN, db)
	if err != nil {
		return err
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("cdcjoin: e2e: connect %s: %w", redact(dsn), err)
	}
	defer c.Close(ctx)
	// Without arguments pgx uses the simple protocol: the whole file runs.
	if _, err := c.Exec(ctx, string(schema)); err != nil {
		return fmt.Errorf("cdcjoin: e2e: apply %s: %w", schemaFile, err)
	}
	return nil
}

// Port returns the port of dsn (a postgres:// URL), 5432 when it names
// none, for the connector's database.port.
func Port(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("cdcjoin: e2e: postgres dsn: %w", err)
	}
	if p := u.Port(); p != "" {
		return p, nil
	}
	return "5432", nil
}

func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		return u.Redacted()
	}
	return "postgres"
}

// ExecFile runs the SQL file path in one simple-protocol batch (one
// implicit transaction): schema files, not change scripts (see
// Statements).
func (p *Postgres) ExecFile(ctx context.Context, path string) error {
	sql, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cdcjoin: e2e: %w", err)
	}
	if _, err := p.conn.Exec(ctx, string(sql)); err != nil {
		return fmt.Errorf("cdcjoin: e2e: apply %s: %w", path, err)
	}
	return nil
}

// Statements reads a change script (like deploy/local/types-dml.sql) as
// one transaction per statement: statements end with ';' at the end of a
// line; lines starting with "--" are comments.
func Statements(path string) ([]Tx, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: %w", err)
	}
	var out []Tx
	var cur []string
	for _, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur = append(cur, line)
		if strings.HasSuffix(t, ";") {
			sql := strings.TrimSuffix(strings.TrimSpace(strings.Join(cur, "\n")), ";")
			out = append(out, Tx{Name: fmt.Sprintf("%s #%d", path, len(out)+1), Stmts: []Stmt{{SQL: sql}}})
			cur = nil
		}
	}
	if len(cur) > 0 {
		return nil, fmt.Errorf("cdcjoin: e2e: %s: the last statement has no ';'", path)
	}
	return out, nil
}

// OpenPostgres connects to dsn.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: connect %s: %w", redact(dsn), err)
	}
	return &Postgres{conn: c}, nil
}

// Close closes the connection.
func (p *Postgres) Close(ctx context.Context) error { return p.conn.Close(ctx) }

// Apply runs tx in one transaction and returns the number of rows its
// statements changed and the transaction's id (txid_current(), what
// Debezium reports as source.txId).
func (p *Postgres) Apply(ctx context.Context, tx Tx) (rows int64, txid int64, err error) {
	t, err := p.conn.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("cdcjoin: e2e: begin %q: %w", tx.Name, err)
	}
	defer t.Rollback(ctx) //nolint:errcheck // no-op after Commit
	for _, s := range tx.Stmts {
		tag, err := t.Exec(ctx, s.SQL, s.Args...)
		if err != nil {
			return 0, 0, fmt.Errorf("cdcjoin: e2e: %q: %s %s: %w", tx.Name, s.SQL, shortArgs(s.Args), err)
		}
		rows += tag.RowsAffected()
	}
	if err := t.QueryRow(ctx, `SELECT txid_current()`).Scan(&txid); err != nil {
		return 0, 0, fmt.Errorf("cdcjoin: e2e: txid_current: %w", err)
	}
	if err := t.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("cdcjoin: e2e: commit %q: %w", tx.Name, err)
	}
	return rows, txid, nil
}

// JoinSQL is the oracle query: the JOIN that cdcjoin materializes.
func JoinSQL(left bool) string {
	kind := "JOIN"
	if left {
		kind = "LEFT JOIN"
	}
	return `SELECT u.id::text, u.firstname, u.lastname, d.id::text, d.domain_name FROM users u ` + kind + ` domains d ON d.user_id = u.id`
}

// Join reads the oracle: JoinSQL(left), as sorted rows.
func (p *Postgres) Join(ctx context.Context, left bool) ([]Row, error) {
	out, err := p.query(ctx, JoinSQL(left), len(Columns))
	if err != nil {
		return nil, err
	}
	SortRows(out)
	return out, nil
}

// query runs q, whose n columns are text, and returns its rows.
func (p *Postgres) query(ctx context.Context, q string, n int) ([]Row, error) {
	rs, err := p.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: oracle query: %w", err)
	}
	defer rs.Close()
	var out []Row
	vals := make([]*string, n)
	dest := make([]any, n)
	for i := range vals {
		dest[i] = &vals[i]
	}
	for rs.Next() {
		for i := range vals {
			vals[i] = nil
		}
		if err := rs.Scan(dest...); err != nil {
			return nil, fmt.Errorf("cdcjoin: e2e: oracle row: %w", err)
		}
		r := make(Row, len(vals))
		for i, v := range vals {
			if v == nil {
				r[i] = Cell{Null: true}
			} else {
				r[i] = Cell{Text: *v}
			}
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: oracle query: %w", err)
	}
	return out, nil
}

// Count returns SELECT count(*) FROM table.
func (p *Postgres) Count(ctx context.Context, table string) (int64, error) {
	var n int64
	err := p.conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("cdcjoin: e2e: count %s: %w", table, err)
	}
	return n, nil
}

// shortArgs formats statement arguments for an error message, eliding
// long values.
func shortArgs(args []any) string {
	var b []string
	for _, a := range args {
		v := fmt.Sprint(a)
		if p, ok := a.(*string); ok {
			v = "NULL"
			if p != nil {
				v = *p
			}
		}
		if len(v) > 40 {
			v = fmt.Sprintf("%.30s…(%d bytes)", v, len(v))
		}
		b = append(b, v)
	}
	return "[" + strings.Join(b, " ") + "]"
}

// QueryText runs the query q and returns its rows with the columns cols
// (q's output names) as text, unsorted: the oracle of a job written as SQL
// is PostgreSQL's own answer to the job's query (compare with Diff, as
// multisets).
func (p *Postgres) QueryText(ctx context.Context, q string, cols []string) ([]Row, error) {
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = `q."` + strings.ReplaceAll(c, `"`, `""`) + `"::text`
	}
	return p.query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM ("+q+") q", len(cols))
}
