package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	json "github.com/goccy/go-json"
)

// jsonlRecord is one line of the replay input format.
type jsonlRecord struct {
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Offset    *int64          `json:"offset"`
	Key       json.RawMessage `json:"key"`
	Value     json.RawMessage `json:"value"`
}

// MaxLineBytes bounds one input line of ReadJSONL.
const MaxLineBytes = 64 << 20

// ReadJSONL reads the replay input format, one Kafka record per line:
//
//	{"topic":"…","partition":0,"offset":12,"key":<JSON or null>,"value":<JSON or null>}
//
// and calls fn for each record in order. A JSON null key or value becomes nil
// (a null value is a tombstone). The Record and its slices are reused after fn
// returns. Blank lines are skipped. A line that is not such an object is an
// error naming the line number (name is used in the message).
func ReadJSONL(r io.Reader, name string, fn func(*Record) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var line []byte
	var jr jsonlRecord
	var rec Record
	for n := 1; ; n++ {
		var err error
		line, err = readLine(br, line[:0])
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
		jr = jsonlRecord{}
		if uerr := json.Unmarshal(line, &jr); uerr != nil {
			return fmt.Errorf("cdcjoin: %s line %d: not a replay record {\"topic\",\"partition\",\"offset\",\"key\",\"value\"}: %w", name, n, uerr)
		}
		if jr.Topic == "" || jr.Offset == nil {
			return fmt.Errorf("cdcjoin: %s line %d: record needs \"topic\" and \"offset\"", name, n)
		}
		rec = Record{Topic: jr.Topic, Partition: jr.Partition, Offset: *jr.Offset, Key: nullToNil(jr.Key), Value: nullToNil(jr.Value)}
		if ferr := fn(&rec); ferr != nil {
			return ferr
		}
		if err == io.EOF {
			return nil
		}
	}
}

func nullToNil(b json.RawMessage) []byte {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return b
}

func readLine(br *bufio.Reader, dst []byte) ([]byte, error) {
	for {
		chunk, err := br.ReadSlice('\n')
		dst = append(dst, chunk...)
		if len(dst) > MaxLineBytes {
			return dst, fmt.Errorf("line longer than %d bytes", MaxLineBytes)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return dst, err
	}
}
