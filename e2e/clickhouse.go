package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ClickHouse reads and (for the negative control) tampers with the
// sink's output. Safe for concurrent use (clickhouse-go pools connections).
type ClickHouse struct {
	conn driver.Conn
}

// OpenClickHouse connects to the native protocol at addr (host:port) as
// user default without a password (deploy/local/clickhouse.sh).
func OpenClickHouse(ctx context.Context, addr string) (*ClickHouse, error) {
	conn, err := ch.Open(&ch.Options{Addr: []string{addr}, DialTimeout: 10 * time.Second, ReadTimeout: 2 * time.Minute})
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: clickhouse %s: %w", addr, err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("cdcjoin: e2e: clickhouse %s: %w", addr, err)
	}
	return &ClickHouse{conn: conn}, nil
}

// Close closes the connections.
func (c *ClickHouse) Close() error { return c.conn.Close() }

func ident(s string) string { return "`" + strings.ReplaceAll(s, "`", "\\`") + "`" }

// DropTable drops db.table and its upsert-mode view db.table_current.
func (c *ClickHouse) DropTable(ctx context.Context, db, table string) error {
	for _, t := range []string{table + "_current", table} {
		if err := c.conn.Exec(ctx, "DROP TABLE IF EXISTS "+ident(db)+"."+ident(t)); err != nil {
			return fmt.Errorf("cdcjoin: e2e: drop %s.%s: %w", db, t, err)
		}
	}
	return nil
}

// RowsSQL reads Columns from db.view as text plus NULL flags, whatever the
// columns' ClickHouse types.
func RowsSQL(db, view string) string {
	sel := make([]string, 0, 2*len(Columns))
	for _, col := range Columns {
		sel = append(sel, fmt.Sprintf("ifNull(toString(%s), '')", ident(col)), fmt.Sprintf("isNull(%s)", ident(col)))
	}
	return "SELECT " + strings.Join(sel, ", ") + " FROM " + ident(db) + "." + ident(view)
}

// Rows reads the materialized join from db.view (the sink's
// <table>_current view in upsert mode), as sorted rows.
func (c *ClickHouse) Rows(ctx context.Context, db, view string) ([]Row, error) {
	rs, err := c.conn.Query(ctx, RowsSQL(db, view))
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: read %s.%s: %w", db, view, err)
	}
	defer rs.Close()
	texts := make([]string, len(Columns))
	nulls := make([]uint8, len(Columns))
	dest := make([]any, 0, 2*len(Columns))
	for i := range Columns {
		dest = append(dest, &texts[i], &nulls[i])
	}
	var out []Row
	for rs.Next() {
		if err := rs.Scan(dest...); err != nil {
			return nil, fmt.Errorf("cdcjoin: e2e: read %s.%s: %w", db, view, err)
		}
		r := make(Row, len(Columns))
		for i := range Columns {
			r[i] = Cell{Text: texts[i], Null: nulls[i] != 0}
			if r[i].Null {
				r[i].Text = ""
			}
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: read %s.%s: %w", db, view, err)
	}
	SortRows(out)
	return out, nil
}

// Tamper is the negative control: it changes the visible result of the
// upsert-mode table db.table behind the sink's back, the way a lost or
// garbled change would, by inserting rows with a higher _version (the
// sink's hidden columns _pk, _ck, _version, _deleted):
//   - the first live row by (_pk, _ck) gets its firstname changed
//     (a corrupted row);
//   - the second one is marked _deleted (a dropped event).
//
// It returns how many rows it tampered with (0, 1 or 2).
func (c *ClickHouse) Tamper(ctx context.Context, db, table string) (int, error) {
	t := ident(db) + "." + ident(table)
	var n uint64
	if err := c.conn.QueryRow(ctx, "SELECT count() FROM "+t+" FINAL WHERE _deleted = 0").Scan(&n); err != nil {
		return 0, fmt.Errorf("cdcjoin: e2e: tamper: %w", err)
	}
	cols := strings.Join(func() []string {
		q := make([]string, len(Columns))
		for i, col := range Columns {
			q[i] = ident(col)
		}
		return q
	}(), ", ")
	done := 0
	for i, q := range []string{
		// corrupt one value
		fmt.Sprintf(`INSERT INTO %s (%s, _pk, _ck, _version, _deleted)
SELECT user_id, concat(ifNull(firstname, ''), ' (corrupted)'), lastname, domain_id, domain_name, _pk, _ck, _version + 1, _deleted
FROM %s FINAL WHERE _deleted = 0 ORDER BY _pk, _ck LIMIT 1`, t, cols, t),
		// drop one row
		fmt.Sprintf(`INSERT INTO %s (%s, _pk, _ck, _version, _deleted)
SELECT %s, _pk, _ck, _version + 1, 1
FROM %s FINAL WHERE _deleted = 0 ORDER BY _pk, _ck LIMIT 1, 1`, t, cols, cols, t),
	} {
		if uint64(i) >= n {
			break
		}
		if err := c.conn.Exec(ctx, q); err != nil {
			return done, fmt.Errorf("cdcjoin: e2e: tamper with %s: %w", t, err)
		}
		done++
	}
	return done, nil
}
