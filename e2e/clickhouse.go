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

// RowsSQL reads cols from db.view as text plus NULL flags, whatever the
// columns' ClickHouse types.
func RowsSQL(db, view string, cols []string) string {
	sel := make([]string, 0, 2*len(cols))
	for _, col := range cols {
		sel = append(sel, fmt.Sprintf("ifNull(toString(%s), '')", ident(col)), fmt.Sprintf("isNull(%s)", ident(col)))
	}
	return "SELECT " + strings.Join(sel, ", ") + " FROM " + ident(db) + "." + ident(view)
}

// Rows reads the materialized join (Columns) from db.view (the sink's
// <table>_current view in upsert mode), as sorted rows.
func (c *ClickHouse) Rows(ctx context.Context, db, view string) ([]Row, error) {
	out, err := c.RowsOf(ctx, db, view, Columns)
	if err != nil {
		return nil, err
	}
	SortRows(out)
	return out, nil
}

// RowsOf reads cols of db.view as text cells (unsorted).
func (c *ClickHouse) RowsOf(ctx context.Context, db, view string, cols []string) ([]Row, error) {
	rs, err := c.conn.Query(ctx, RowsSQL(db, view, cols))
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: e2e: read %s.%s: %w", db, view, err)
	}
	defer rs.Close()
	texts := make([]string, len(cols))
	nulls := make([]uint8, len(cols))
	dest := make([]any, 0, 2*len(cols))
	for i := range cols {
		dest = append(dest, &texts[i], &nulls[i])
	}
	var out []Row
	for rs.Next() {
		if err := rs.Scan(dest...); err != nil {
			return nil, fmt.Errorf("cdcjoin: e2e: read %s.%s: %w", db, view, err)
		}
		r := make(Row, len(cols))
		for i := range cols {
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
	return out, nil
}

// Tamper is the negative control: it changes the visible result of the
// upsert-mode table db.table (the users/domains join, Columns) behind the
// sink's back; see TamperColumns.
func (c *ClickHouse) Tamper(ctx context.Context, db, table string) (int, error) {
	return c.TamperColumns(ctx, db, table, Columns, "firstname")
}

// TamperColumns changes the visible result of the upsert-mode table
// db.table, whose select columns are cols, the way a lost or garbled change
// would, by inserting rows with a higher _version (the sink's hidden
// columns _pk, _ck, _version, _deleted):
//   - the first live row by (_pk, _ck) gets the String column corrupt
//     changed (a corrupted row);
//   - the second one is marked _deleted (a dropped event).
//
// It returns how many rows it tampered with (0, 1 or 2).
func (c *ClickHouse) TamperColumns(ctx context.Context, db, table string, cols []string, corrupt string) (int, error) {
	t := ident(db) + "." + ident(table)
	var n uint64
	if err := c.conn.QueryRow(ctx, "SELECT count() FROM "+t+" FINAL WHERE _deleted = 0").Scan(&n); err != nil {
		return 0, fmt.Errorf("cdcjoin: e2e: tamper: %w", err)
	}
	q := make([]string, len(cols))
	changed := make([]string, len(cols))
	for i, col := range cols {
		q[i] = ident(col)
		changed[i] = q[i]
		if col == corrupt {
			changed[i] = fmt.Sprintf("concat(ifNull(%s, ''), ' (corrupted)')", q[i])
		}
	}
	list := strings.Join(q, ", ")
	done := 0
	for i, stmt := range []string{
		// corrupt one value
		fmt.Sprintf(`INSERT INTO %s (%s, _pk, _ck, _version, _deleted)
SELECT %s, _pk, _ck, _version + 1, _deleted
FROM %s FINAL WHERE _deleted = 0 ORDER BY _pk, _ck LIMIT 1`, t, list, strings.Join(changed, ", "), t),
		// drop one row
		fmt.Sprintf(`INSERT INTO %s (%s, _pk, _ck, _version, _deleted)
SELECT %s, _pk, _ck, _version + 1, 1
FROM %s FINAL WHERE _deleted = 0 ORDER BY _pk, _ck LIMIT 1, 1`, t, list, list, t),
	} {
		if uint64(i) >= n {
			break
		}
		if err := c.conn.Exec(ctx, stmt); err != nil {
			return done, fmt.Errorf("cdcjoin: e2e: tamper with %s: %w", t, err)
		}
		done++
	}
	return done, nil
}
