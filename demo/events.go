package demo

import (
	"strconv"

	"github.com/cdcjoin/cdcjoin/row"
)

// The demo's tables, as Debezium's PostgreSQL connector captures them with
// JsonConverter schemas enabled.
const (
	usersTopic   = "dbserver1.public.users"
	domainsTopic = "dbserver1.public.domains"
)

type user struct {
	id                  int64
	firstname, lastname string
}

type domain struct {
	id, userID int64
	name       string
}

type column struct {
	name, typ string
	optional  bool
}

var (
	usersCols   = []column{{"id", "int32", false}, {"firstname", "string", true}, {"lastname", "string", true}}
	domainsCols = []column{{"id", "int32", false}, {"user_id", "int32", true}, {"domain_name", "string", true}}
)

// tableRow is one table row's column values (int64 or string; nil is NULL).
type tableRow []any

func (u user) row() tableRow   { return tableRow{u.id, u.firstname, u.lastname} }
func (d domain) row() tableRow { return tableRow{d.id, d.userID, d.name} }

// encoder renders Debezium records of one table.
type encoder struct {
	topic, table string
	cols         []column
	lsn          int64
	tsMs         int64
}

func appendFields(b []byte, cols []column) []byte {
	b = append(b, '[')
	for i, c := range cols {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"`+c.typ+`","optional":`+strconv.FormatBool(c.optional)+`,"field":"`+c.name+`"}`...)
	}
	return append(b, ']')
}

func (e *encoder) key(id int64) []byte {
	b := []byte(`{"schema":{"type":"struct","fields":`)
	b = appendFields(b, e.cols[:1])
	b = append(b, `,"optional":false,"name":"`+e.topic+`.Key"},"payload":{"id":`...)
	b = strconv.AppendInt(b, id, 10)
	return append(b, "}}"...)
}

func appendRow(b []byte, cols []column, r tableRow) []byte {
	if r == nil {
		return append(b, "null"...)
	}
	b = append(b, '{')
	for i, c := range cols {
		if i > 0 {
			b = append(b, ',')
		}
		b = row.AppendJSONString(b, c.name)
		b = append(b, ':')
		switch v := r[i].(type) {
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case string:
			b = row.AppendJSONString(b, v)
		default:
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
}

// value renders an envelope; before or after may be nil.
func (e *encoder) value(op byte, before, after tableRow, snapshot bool) []byte {
	e.lsn += 8
	e.tsMs += 1000
	b := []byte(`{"schema":{"type":"struct","fields":[{"type":"struct","fields":`)
	b = appendFields(b, e.cols)
	b = append(b, `,"optional":true,"name":"`+e.topic+`.Value","field":"before"},{"type":"struct","fields":`...)
	b = appendFields(b, e.cols)
	b = append(b, `,"optional":true,"name":"`+e.topic+`.Value","field":"after"},`...)
	b = append(b, `{"type":"struct","fields":[{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"},`...)
	b = append(b, `{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":"`+e.topic+`.Envelope"},"payload":{"before":`...)
	b = appendRow(b, e.cols, before)
	b = append(b, `,"after":`...)
	b = appendRow(b, e.cols, after)
	snap := "false"
	if snapshot {
		snap = "true"
	}
	b = append(b, `,"source":{"connector":"postgresql","name":"dbserver1","ts_ms":`...)
	b = strconv.AppendInt(b, e.tsMs, 10)
	b = append(b, `,"snapshot":"`+snap+`","db":"shop","schema":"public","table":"`+e.table+`","lsn":`...)
	b = strconv.AppendInt(b, e.lsn, 10)
	b = append(b, `},"op":"`...)
	b = append(b, op)
	b = append(b, `","ts_ms":`...)
	b = strconv.AppendInt(b, e.tsMs, 10)
	return append(b, "}}"...)
}
