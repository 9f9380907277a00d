package cdcgen

import (
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"
	"time"
)

// Debezium identity written into every source block.
const (
	connectorVersion = "3.6.1.Final"
	sourceDB         = "shop"
	// snapshotAllowed is the io.debezium.data.Enum of source.snapshot in 3.x.
	snapshotAllowed = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)

type colKind uint8

const (
	colID colKind = iota
	colUserID
	colFirst
	colLast
	colEmail
	colBalance
	colCreatedZoned
	colCreatedMicro
	colPad
	colDomainName
	colPrice
)

type column struct {
	name string
	kind colKind
	pad  int // colPad: 1-based pad number
}

func (c column) text() bool {
	switch c.kind {
	case colFirst, colLast, colEmail, colPad, colDomainName:
		return true
	}
	return false
}

// image is a row image to encode: which row, at which versions.
type image struct {
	id      int64
	a, b    uint32 // users: sel, uns; domains: ver
	user    int64  // domains: user_id
	keyOnly bool   // REPLICA IDENTITY DEFAULT delete: key columns only, others null
}

// pos is a source position (the PostgreSQL connector's source block).
type pos struct {
	txID, lsn  int64
	lastCommit int64 // 0: null (no commit seen yet, e.g. in a snapshot)
	tsUs       int64 // commit (or snapshot read) time
	procUs     int64 // Debezium processing time: the envelope's ts_ms (its ts_ns has sub-µs digits)
	snapshot   string
}

// tableEnc encodes one table's keys and values. Everything that does not
// depend on the row (schema blocks, field-name prefixes) is precomputed.
type tableEnc struct {
	topic      string
	cols       []column
	colPrefix  [][]byte // `"name":` with a leading comma after the first column
	keySchema  []byte   // `{"schema":{…},"payload":`
	valSchema  []byte
	srcHead    []byte // `{"version":…,"name":"<server>","ts_ms":`
	srcTail    []byte // `,"schema":"<schema>","table":"<table>","txId":`
	pad        *padText
	idBase     int64 // added to every key and foreign key value
	keyScratch []byte
}

// padText is a fixed pseudo-random text that pad values are slices of.
type padText struct {
	text  []byte
	width int
}

func (p *padText) span() int { return len(p.text) - p.width }

func newTableEnc(topic, defaultTable string, cols []column, pad *padText) *tableEnc {
	server, schema, table := "dbserver1", "public", defaultTable
	if parts := strings.Split(topic, "."); len(parts) == 3 {
		server, schema, table = parts[0], parts[1], parts[2]
	}
	e := &tableEnc{topic: topic, cols: cols, pad: pad}
	for i, c := range cols {
		var p []byte
		if i > 0 {
			p = append(p, ',')
		}
		p = appendJSONString(p, c.name)
		e.colPrefix = append(e.colPrefix, append(p, ':'))
	}
	// Key schema.
	k := []byte(`{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"default":0,"field":"id"}],"optional":false,"name":`)
	k = appendJSONString(k, topic+".Key")
	e.keySchema = append(k, `},"payload":`...)
	// Value schema.
	row := []byte(`{"type":"struct","fields":[`)
	for i, c := range cols {
		if i > 0 {
			row = append(row, ',')
		}
		row = appendColumnSchema(row, c)
	}
	row = append(row, `],"optional":true,"name":`...)
	row = appendJSONString(row, topic+".Value")
	v := []byte(`{"schema":{"type":"struct","fields":[`)
	v = append(v, row...)
	v = append(v, `,"field":"before"},`...)
	v = append(v, row...)
	v = append(v, `,"field":"after"},`...)
	v = append(v, `{"type":"struct","fields":[`+
		`{"type":"string","optional":false,"field":"version"},`+
		`{"type":"string","optional":false,"field":"connector"},`+
		`{"type":"string","optional":false,"field":"name"},`+
		`{"type":"int64","optional":false,"field":"ts_ms"},`+
		`{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"`+snapshotAllowed+`"},"default":"false","field":"snapshot"},`+
		`{"type":"string","optional":false,"field":"db"},`+
		`{"type":"string","optional":true,"field":"sequence"},`+
		`{"type":"int64","optional":true,"field":"ts_us"},`+
		`{"type":"int64","optional":true,"field":"ts_ns"},`+
		`{"type":"string","optional":false,"field":"schema"},`+
		`{"type":"string","optional":false,"field":"table"},`+
		`{"type":"int64","optional":true,"field":"txId"},`+
		`{"type":"int64","optional":true,"field":"lsn"},`+
		`{"type":"int64","optional":true,"field":"xmin"},`+
		`{"type":"string","optional":true,"field":"origin"},`+
		`{"type":"int64","optional":true,"field":"origin_lsn"}],`+
		`"optional":false,"name":"io.debezium.connector.postgresql.Source","version":1,"field":"source"},`+
		`{"type":"struct","fields":[`+
		`{"type":"string","optional":false,"field":"id"},`+
		`{"type":"int64","optional":false,"field":"total_order"},`+
		`{"type":"int64","optional":false,"field":"data_collection_order"}],`+
		`"optional":true,"name":"event.block","version":1,"field":"transaction"},`+
		`{"type":"string","optional":false,"field":"op"},`+
		`{"type":"int64","optional":true,"field":"ts_ms"},`+
		`{"type":"int64","optional":true,"field":"ts_us"},`+
		`{"type":"int64","optional":true,"field":"ts_ns"}],"optional":false,"name":`...)
	v = appendJSONString(v, topic+".Envelope")
	e.valSchema = append(v, `,"version":2},"payload":`...)
	// Source block.
	h := []byte(`{"version":"` + connectorVersion + `","connector":"postgresql","name":`)
	h = appendJSONString(h, server)
	e.srcHead = append(h, `,"ts_ms":`...)
	t := []byte(`,"schema":`)
	t = appendJSONString(t, schema)
	t = append(t, `,"table":`...)
	t = appendJSONString(t, table)
	e.srcTail = append(t, `,"txId":`...)
	return e
}

// appendColumnSchema writes a Kafka Connect field schema in JsonConverter's
// key order: type, optional, name, version, parameters, field.
func appendColumnSchema(b []byte, c column) []byte {
	switch c.kind {
	case colID: // bigserial: NOT NULL with a default
		b = append(b, `{"type":"int64","optional":false,"default":0`...)
	case colUserID: // bigint NOT NULL
		b = append(b, `{"type":"int64","optional":false`...)
	case colBalance:
		b = append(b, `{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"12"}`...)
	case colPrice:
		b = append(b, `{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"}`...)
	case colCreatedZoned:
		b = append(b, `{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"default":"1970-01-01T00:00:00.000000Z"`...)
	case colCreatedMicro:
		b = append(b, `{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"default":0`...)
	default:
		b = append(b, `{"type":"string","optional":true`...)
	}
	b = append(b, `,"field":`...)
	b = appendJSONString(b, c.name)
	return append(b, '}')
}

func usersColumns(created TimestampType, pads int) []column {
	cols := []column{{"id", colID, 0}, {"firstname", colFirst, 0}, {"lastname", colLast, 0},
		{"email", colEmail, 0}, {"balance", colBalance, 0}}
	if created == MicroTimestamp {
		cols = append(cols, column{"created_at", colCreatedMicro, 0})
	} else {
		cols = append(cols, column{"created_at", colCreatedZoned, 0})
	}
	for i := 1; i <= pads; i++ {
		cols = append(cols, column{"pad_" + strconv.Itoa(i), colPad, i})
	}
	return cols
}

func domainsColumns(pads int) []column {
	cols := []column{{"id", colID, 0}, {"user_id", colUserID, 0}, {"domain_name", colDomainName, 0},
		{"price", colPrice, 0}}
	for i := 1; i <= pads; i++ {
		cols = append(cols, column{"pad_" + strconv.Itoa(i), colPad, i})
	}
	return cols
}

// fingerprint identifies a text column's value in img: equal fingerprints
// mean equal values (used to find unchanged, TOASTable columns).
func (e *tableEnc) fingerprint(c column, img *image) uint64 {
	switch c.kind {
	case colFirst:
		return uint64(userFirst(img.id, img.a))
	case colLast:
		return uint64(userLast(img.id, img.a))
	case colEmail:
		return uint64(img.b)
	case colPad:
		if e.isUsers() {
			return uint64(padOffset(img.id, img.b, c.pad, e.pad.span()))
		}
		return uint64(padOffset(img.id, img.a, c.pad, e.pad.span()))
	case colDomainName:
		d := domainNameOf(img.id, img.a)
		return uint64(d.word)<<40 | uint64(d.num)<<20 | uint64(d.tld)
	}
	return 0
}

func (e *tableEnc) isUsers() bool { return e.cols[1].kind == colFirst }

// appendImage writes a row struct. toast, when non-nil, marks columns to
// send as the unavailable-value placeholder.
func (e *tableEnc) appendImage(b []byte, img *image, toast []bool) []byte {
	b = append(b, '{')
	for i, c := range e.cols {
		b = append(b, e.colPrefix[i]...)
		if toast != nil && toast[i] {
			b = append(b, `"__debezium_unavailable_value"`...)
			continue
		}
		if img.keyOnly && c.kind != colID {
			// Debezium fills NOT NULL non-key columns with their zero value.
			if c.kind == colUserID {
				b = append(b, '0')
			} else {
				b = append(b, "null"...)
			}
			continue
		}
		switch c.kind {
		case colID:
			b = strconv.AppendInt(b, img.id+e.idBase, 10)
		case colUserID:
			b = strconv.AppendInt(b, img.user+e.idBase, 10)
		case colFirst:
			b = appendJSONString(b, firstNames[userFirst(img.id, img.a)])
		case colLast:
			b = appendJSONString(b, lastNames[userLast(img.id, img.a)])
		case colEmail:
			b = append(b, '"')
			b = appendEmail(b, img.id, img.b)
			b = append(b, '"')
		case colBalance:
			b = appendDecimalBase64(b, userBalance(img.id, img.b))
		case colCreatedZoned:
			b = append(b, '"')
			b = time.UnixMicro(userCreatedAt(img.id, img.b)).UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z")
			b = append(b, '"')
		case colCreatedMicro:
			b = strconv.AppendInt(b, userCreatedAt(img.id, img.b), 10)
		case colPad:
			ver := img.a
			if e.isUsers() {
				ver = img.b
			}
			off := padOffset(img.id, ver, c.pad, e.pad.span())
			b = append(b, '"')
			b = append(b, e.pad.text[off:off+e.pad.width]...)
			b = append(b, '"')
		case colDomainName:
			b = append(b, '"')
			b = domainNameOf(img.id, img.a).appendTo(b)
			b = append(b, '"')
		case colPrice:
			b = appendDecimalBase64(b, domainPrice(img.id, img.a))
		}
	}
	return append(b, '}')
}

// appendKey writes the record key of row id (a generator-local id).
func (e *tableEnc) appendKey(b []byte, schemaOn bool, id int64) []byte {
	if schemaOn {
		b = append(b, e.keySchema...)
	}
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, id+e.idBase, 10)
	b = append(b, '}')
	if schemaOn {
		b = append(b, '}')
	}
	return b
}

// partition returns murmur2(schemaless key) % n, as Kafka's default
// partitioner does for the key bytes {"id":N}.
func (e *tableEnc) partition(id int64, n int) int {
	if n == 1 {
		return 0
	}
	e.keyScratch = e.appendKey(e.keyScratch[:0], false, id)
	return int(murmur2(e.keyScratch)&0x7fffffff) % n
}

// appendValue writes a change event value. before/after nil mean null.
func (e *tableEnc) appendValue(b []byte, schemaOn bool, op byte, before, after *image, toast []bool, p *pos) []byte {
	if schemaOn {
		b = append(b, e.valSchema...)
	}
	b = append(b, `{"before":`...)
	if before == nil {
		b = append(b, "null"...)
	} else {
		b = e.appendImage(b, before, nil)
	}
	b = append(b, `,"after":`...)
	if after == nil {
		b = append(b, "null"...)
	} else {
		b = e.appendImage(b, after, toast)
	}
	b = append(b, `,"source":`...)
	b = append(b, e.srcHead...)
	b = strconv.AppendInt(b, p.tsUs/1000, 10)
	b = append(b, `,"snapshot":"`...)
	b = append(b, p.snapshot...)
	b = append(b, `","db":"`+sourceDB+`","sequence":"[`...)
	if p.lastCommit == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, `\"`...)
		b = strconv.AppendInt(b, p.lastCommit, 10)
		b = append(b, `\"`...)
	}
	b = append(b, `,\"`...)
	b = strconv.AppendInt(b, p.lsn, 10)
	b = append(b, `\"]","ts_us":`...)
	b = strconv.AppendInt(b, p.tsUs, 10)
	b = append(b, `,"ts_ns":`...)
	b = strconv.AppendInt(b, p.tsUs*1000, 10)
	b = append(b, e.srcTail...)
	b = strconv.AppendInt(b, p.txID, 10)
	b = append(b, `,"lsn":`...)
	b = strconv.AppendInt(b, p.lsn, 10)
	b = append(b, `,"xmin":null,"origin":null,"origin_lsn":null},"transaction":null,"op":"`...)
	b = append(b, op)
	b = append(b, `","ts_ms":`...)
	b = strconv.AppendInt(b, p.procUs/1000, 10)
	b = append(b, `,"ts_us":`...)
	b = strconv.AppendInt(b, p.procUs, 10)
	b = append(b, `,"ts_ns":`...)
	b = strconv.AppendInt(b, p.procUs*1000+int64(mix(uint64(p.procUs), 0, 0)%10)*100, 10)
	b = append(b, '}')
	if schemaOn {
		b = append(b, '}')
	}
	return b
}

// appendDecimalBase64 writes Kafka Connect's Decimal encoding of an unscaled
// value: the minimal big-endian two's complement bytes (Java's
// BigInteger.toByteArray), base64 with padding, as a JSON string.
func appendDecimalBase64(b []byte, unscaled int64) []byte {
	var raw [8]byte
	binary.BigEndian.PutUint64(raw[:], uint64(unscaled))
	i := 0
	for i < 7 {
		if raw[i] == 0 && raw[i+1]&0x80 == 0 || raw[i] == 0xff && raw[i+1]&0x80 != 0 {
			i++
			continue
		}
		break
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, raw[i:])
	return append(b, '"')
}

// appendJSONString writes s as a JSON string the way Jackson does: UTF-8
// kept as is; quote, backslash and control characters escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// newPadText builds the text pad values are cut from: lowercase letters,
// digits and spaces, no escaping needed.
func newPadText(width int, next func() uint64) *padText {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 "
	n := 8192
	if n < 4*width {
		n = 4 * width
	}
	t := make([]byte, n+width)
	for i := range t {
		t[i] = alphabet[next()%uint64(len(alphabet))]
	}
	return &padText{text: t, width: width}
}
