package engine

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"math"

	"github.com/cdcjoin/cdcjoin/debezium"

	json "github.com/goccy/go-json"
)

// MaxLineBytes bounds one input line of ReadJSONL.
const MaxLineBytes = 64 << 20

// ReadJSONL reads the replay input format, one Kafka record per line:
//
//	{"topic":"…","partition":0,"offset":12,"key":<JSON or null>,"value":<JSON or null>}
//
// and calls fn for each record in order. A JSON null key or value becomes nil
// (a null value is a tombstone). Instead of "key"/"value" a line may carry
// the Kafka record's bytes as "key_b64"/"value_b64" (standard base64, e.g.
// Avro in the Schema Registry wire format; null or absent: nil), and its
// headers as "headers": [{"key":"…","value_b64":"…"}] (Apicurio's id
// headers). The Record and its slices are reused after fn
// returns. Blank lines are skipped. A line that is not such an object is an
// error naming the line number (name is used in the message).
func ReadJSONL(r io.Reader, name string, fn func(*Record) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var line, buf []byte
	var p lineParser
	for n := 1; ; n++ {
		var err error
		line, buf, err = readLine(br, buf[:0])
		if err == io.EOF && len(line) == 0 {
			return nil
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("cdcjoin: read %s line %d: %w", name, n, err)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		rec, perr := p.parse(line)
		if perr != nil {
			return fmt.Errorf("cdcjoin: %s line %d: not a replay record {\"topic\",\"partition\",\"offset\",\"key\",\"value\"}: %w", name, n, perr)
		}
		if rec == nil {
			return fmt.Errorf("cdcjoin: %s line %d: record needs \"topic\" and \"offset\"", name, n)
		}
		if ferr := fn(rec); ferr != nil {
			return ferr
		}
		if err == io.EOF {
			return nil
		}
	}
}

// lineParser parses replay lines without allocating per line: key and value
// stay raw JSON slices of the line, and the topic string is reused while
// consecutive lines name the same topic.
type lineParser struct {
	rec     Record
	topic   string
	kb, vb  []byte // decoded key_b64 / value_b64
	headers []debezium.Header
}

// parse parses one line; a nil Record (and nil error) means "topic" or
// "offset" is missing.
func (p *lineParser) parse(line []byte) (*Record, error) {
	var hasTopic, hasOffset bool
	p.rec = Record{}
	err := debezium.Members(line, func(name, raw []byte) error {
		switch string(name) {
		case "topic":
			if t, ok := debezium.PlainString(raw); ok {
				if string(t) != p.topic {
					p.topic = string(t)
				}
			} else if err := json.Unmarshal(raw, &p.topic); err != nil {
				return fmt.Errorf("\"topic\" is not a string: %w", err)
			}
			p.rec.Topic, hasTopic = p.topic, p.topic != ""
		case "partition":
			if string(raw) == "null" {
				p.rec.Partition = 0
				return nil
			}
			v, ok := debezium.ParseInt(raw)
			if !ok || v < math.MinInt32 || v > math.MaxInt32 {
				return fmt.Errorf("\"partition\" is not a 32-bit integer: %.40s", raw)
			}
			p.rec.Partition = int32(v)
		case "offset":
			if string(raw) == "null" {
				hasOffset = false
				return nil
			}
			v, ok := debezium.ParseInt(raw)
			if !ok {
				return fmt.Errorf("\"offset\" is not a 64-bit integer: %.40s", raw)
			}
			p.rec.Offset, hasOffset = v, true
		case "key":
			p.rec.Key = nullToNil(raw)
		case "value":
			p.rec.Value = nullToNil(raw)
		case "key_b64":
			var err error
			p.kb, p.rec.Key, err = base64Field(p.kb, raw, "key_b64")
			return err
		case "value_b64":
			var err error
			p.vb, p.rec.Value, err = base64Field(p.vb, raw, "value_b64")
			return err
		case "headers":
			return p.parseHeaders(raw)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !hasTopic || !hasOffset {
		return nil, nil
	}
	return &p.rec, nil
}

// base64Field decodes a base64 string member into buf (null: nil).
func base64Field(buf, raw []byte, name string) ([]byte, []byte, error) {
	if string(raw) == "null" {
		return buf, nil, nil
	}
	s, ok := debezium.PlainString(raw)
	if !ok {
		return buf, nil, fmt.Errorf("%q is not a base64 string", name)
	}
	n := base64.StdEncoding.DecodedLen(len(s))
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	m, err := base64.StdEncoding.Decode(buf[:n], s)
	if err != nil {
		return buf, nil, fmt.Errorf("%q: %w", name, err)
	}
	return buf, buf[:m:m], nil
}

// parseHeaders parses [{"key":…,"value_b64":…},…].
func (p *lineParser) parseHeaders(raw []byte) error {
	p.headers = p.headers[:0]
	if string(raw) == "null" {
		return nil
	}
	var hs []struct {
		Key      string  `json:"key"`
		ValueB64 *string `json:"value_b64"`
	}
	if err := json.Unmarshal(raw, &hs); err != nil {
		return fmt.Errorf("\"headers\" is not a list of {\"key\",\"value_b64\"}: %w", err)
	}
	for _, h := range hs {
		var v []byte
		if h.ValueB64 != nil {
			var err error
			if v, err = base64.StdEncoding.DecodeString(*h.ValueB64); err != nil {
				return fmt.Errorf("header %q: %w", h.Key, err)
			}
		}
		p.headers = append(p.headers, debezium.Header{Key: h.Key, Value: v})
	}
	p.rec.Headers = p.headers
	return nil
}

func nullToNil(b []byte) []byte {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return b
}

// readLine returns the next line with its '\n': in br's buffer (valid
// until the next read) when it fits there, else assembled in dst (returned
// as buf for reuse).
func readLine(br *bufio.Reader, dst []byte) (line, buf []byte, err error) {
	chunk, err := br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return chunk, dst, err
	}
	for {
		dst = append(dst, chunk...)
		if len(dst) > MaxLineBytes {
			return dst, dst, fmt.Errorf("line longer than %d bytes", MaxLineBytes)
		}
		if err != bufio.ErrBufferFull {
			return dst, dst, err
		}
		chunk, err = br.ReadSlice('\n')
	}
}
