package clickhouse

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/row"
)

// Repairs: what `cdcjoin reemit` needs of the table to bring it back to
// the join a state holds (a table truncated or rows lost by an operator):
// what the table holds per row key, and corrections written as plain
// INSERTs (no delivery markers: they are no part of a partition's stream).

// Held is what the table holds for one row key (_pk, _ck texts) at one
// version: in changelog mode the net sum(_sign) of its rows (non-zero
// only); in upsert mode the latest version (Net 1 live, 0 deleted).
type Held struct {
	PK, CK  string
	Version uint64
	Net     int64
}

// RowKeyText returns the _pk and _ck texts the table stores for a row key
// (childKey nil: a LEFT join's padded row).
func RowKeyText(parentKey, childKey []row.Value) (pk, ck string) {
	return string(appendKey(nil, parentKey)), string(appendKey(nil, childKey))
}

// Holdings streams what the table holds (Held), markers excluded. The
// sink must be set up (the table exists).
func (s *Sink) Holdings(ctx context.Context, fn func(Held) error) error {
	if err := s.ensureReady(ctx); err != nil {
		return err
	}
	var q string
	if s.chc.Mode == config.ModeChangelog {
		q = fmt.Sprintf("SELECT %s, %s, %s, toInt64(sum(%s)) AS n FROM %s WHERE %s != %s GROUP BY %s, %s, %s HAVING n != 0",
			colPK, colCK, colVersion, colSign, tableName(s.chc), colPK, sqlString(markerPK), colPK, colCK, colVersion)
	} else {
		q = fmt.Sprintf("SELECT %s, %s, max(%s), toInt64(1 - argMax(%s, %s)) FROM %s GROUP BY %s, %s",
			colPK, colCK, colVersion, colDeleted, colVersion, tableName(s.chc), colPK, colCK)
	}
	rows, err := s.conn.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("cdcjoin: clickhouse: read %s: %w", tableName(s.chc), err)
	}
	defer rows.Close()
	for rows.Next() {
		var h Held
		if err := rows.Scan(&h.PK, &h.CK, &h.Version, &h.Net); err != nil {
			return fmt.Errorf("cdcjoin: clickhouse: read %s: %w", tableName(s.chc), err)
		}
		if err := fn(h); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cdcjoin: clickhouse: read %s: %w", tableName(s.chc), err)
	}
	return nil
}

// Cancel makes the net of h's row key and version 0 (changelog mode): it
// inserts |h.Net| copies of one of its rows with the sign flipped, in
// ClickHouse, so that the copies carry the stored values.
func (s *Sink) Cancel(ctx context.Context, h Held) error {
	if s.chc.Mode != config.ModeChangelog || h.Net == 0 {
		return nil
	}
	sign := int64(1)
	if h.Net < 0 {
		sign = -1
	}
	cols, sel := s.columnList(colSign, "", strconv.FormatInt(-sign, 10))
	q := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s = %s AND %s = %s AND %s = %d AND %s = %d LIMIT 1",
		tableName(s.chc), cols, sel, tableName(s.chc), colPK, sqlString(h.PK), colCK, sqlString(h.CK), colVersion, h.Version, colSign, sign)
	for n := h.Net * sign; n > 0; n-- {
		if err := s.retry(ctx, "cancel", func(ctx context.Context) error { return s.conn.Exec(ctx, q) }); err != nil {
			return err
		}
	}
	return nil
}

// Delete marks h's row key deleted at version (upsert mode), copying its
// latest row's values.
func (s *Sink) Delete(ctx context.Context, h Held, version uint64) error {
	if s.chc.Mode == config.ModeChangelog {
		return nil
	}
	cols, sel := s.columnList(colDeleted, strconv.FormatUint(version, 10), "1")
	q := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s = %s AND %s = %s AND %s = %d LIMIT 1",
		tableName(s.chc), cols, sel, tableName(s.chc), colPK, sqlString(h.PK), colCK, sqlString(h.CK), colVersion, h.Version)
	return s.retry(ctx, "delete", func(ctx context.Context) error { return s.conn.Exec(ctx, q) })
}

// columnList returns the table's columns in insert order (the flag
// column last) and a select list of them with the version replaced by
// version (unless empty) and the flag by flagValue.
func (s *Sink) columnList(flag, version, flagValue string) (cols, sel string) {
	c := make([]string, 0, len(s.names)+4)
	for _, n := range s.names {
		c = append(c, quoteIdent(n))
	}
	c = append(c, colPK, colCK, colVersion, flag)
	e := append([]string(nil), c...)
	if version != "" {
		e[len(e)-2] = version
	}
	e[len(e)-1] = flagValue
	return strings.Join(c, ", "), strings.Join(e, ", ")
}

// ensureReady sets the sink up if it is not yet (the table must exist).
func (s *Sink) ensureReady(ctx context.Context) error {
	if s.ready.Load() {
		return nil
	}
	if !s.tableExists(ctx) {
		return fmt.Errorf("cdcjoin: clickhouse: table %s does not exist", tableName(s.chc))
	}
	return s.setup(ctx, nil)
}

// ParseKeyText parses a _pk or _ck text back into its values, for the
// kinds a key's partition can be computed from (NULL, integers, booleans,
// strings); ok is false for other kinds.
func ParseKeyText(s string) (vals []row.Value, ok bool) {
	for len(s) > 0 {
		var v row.Value
		switch {
		case strings.HasPrefix(s, "NULL"):
			v, s = row.Null(), s[4:]
		case strings.HasPrefix(s, "true"):
			v, s = row.Bool(true), s[4:]
		case strings.HasPrefix(s, "false"):
			v, s = row.Bool(false), s[5:]
		case s[0] == '\'':
			var b []byte
			i := 1
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
					if s[i] == '0' {
						b = append(b, 0)
						continue
					}
				}
				b = append(b, s[i])
			}
			if i >= len(s) {
				return nil, false
			}
			v, s = row.String(string(b)), s[i+1:]
		default:
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			n, err := strconv.ParseInt(s[:end], 10, 64)
			if err != nil {
				return nil, false // a tagged kind
			}
			v, s = row.Int(n), s[end:]
		}
		vals = append(vals, v)
		if len(s) > 0 {
			if s[0] != ',' {
				return nil, false
			}
			s = s[1:]
		}
	}
	return vals, true
}
