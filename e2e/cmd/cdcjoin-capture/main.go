// Command cdcjoin-capture dumps Kafka topics as `cdcjoin replay` input lines
// with the records' bytes (key_b64, value_b64, headers), and the schemas
// their Schema Registry ids name, for the decoders' golden tests. Run by
// deploy/local/capture-avro-fixtures.sh.
//
//	cdcjoin-capture --brokers H:P --registry http://127.0.0.1:18081 \
//	    --topics a,b --out records.jsonl --schemas schemas.json
//
// Records are written in create-time order (stable: the --topics order on
// ties), each as
//
//	{"topic":…,"partition":N,"offset":N,"key_b64":…,"value_b64":…,"headers":[{"key":…,"value_b64":…}]}
//
// (key_b64/value_b64 absent for a null key/value). The schemas file maps
// each id the records use to the registry's answer:
// {"confluent":{"7":{"schemaType":"AVRO","schema":"…"}},"globalIds":{…},"contentIds":{…}},
// read from Apicurio's Confluent-compatible API (4-byte ids of the
// Confluent wire format) and its own API (8-byte global ids, and the ids
// of Apicurio's headers).
package main

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type header struct {
	Key      string `json:"key"`
	ValueB64 string `json:"value_b64"`
}

type line struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	KeyB64    *string  `json:"key_b64,omitempty"`
	ValueB64  *string  `json:"value_b64,omitempty"`
	Headers   []header `json:"headers,omitempty"`
	ts        time.Time
	order     int
}

type schema struct {
	SchemaType string `json:"schemaType,omitempty"`
	Schema     string `json:"schema"`
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:19092", "Kafka bootstrap brokers")
	registry := flag.String("registry", "http://127.0.0.1:18081", "Apicurio Registry root URL")
	topics := flag.String("topics", "", "comma-separated topics, in tie-break order")
	out := flag.String("out", "", "records file (JSON lines)")
	schemasOut := flag.String("schemas", "", "schemas file (JSON)")
	flag.Parse()
	if err := run(*brokers, *registry, strings.Split(*topics, ","), *out, *schemasOut); err != nil {
		fmt.Fprintln(os.Stderr, "cdcjoin-capture:", err)
		os.Exit(1)
	}
}

func run(brokers, registry string, topics []string, out, schemasOut string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		return err
	}
	want := map[string]map[int32]int64{}
	remaining := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = map[int32]int64{}
			}
			want[o.Topic][o.Partition] = o.Offset
			remaining++
		}
	})
	order := map[string]int{}
	for i, t := range topics {
		order[t] = i
	}
	var lines []line
	for remaining > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("topics not read to their end: %w", err)
		}
		fs.EachError(func(t string, p int32, e error) { err = fmt.Errorf("%s/%d: %w", t, p, e) })
		if err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			l := line{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, ts: r.Timestamp, order: order[r.Topic]}
			if r.Key != nil {
				s := base64.StdEncoding.EncodeToString(r.Key)
				l.KeyB64 = &s
			}
			if r.Value != nil {
				s := base64.StdEncoding.EncodeToString(r.Value)
				l.ValueB64 = &s
			}
			for _, h := range r.Headers {
				l.Headers = append(l.Headers, header{h.Key, base64.StdEncoding.EncodeToString(h.Value)})
			}
			lines = append(lines, l)
			if r.Offset+1 == want[r.Topic][r.Partition] {
				remaining--
			}
		})
	}
	sort.SliceStable(lines, func(i, j int) bool {
		if !lines[i].ts.Equal(lines[j].ts) {
			return lines[i].ts.Before(lines[j].ts)
		}
		if lines[i].order != lines[j].order {
			return lines[i].order < lines[j].order
		}
		return lines[i].Offset < lines[j].Offset
	})
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	ids := map[string]map[int64]bool{"confluent": {}, "globalIds": {}, "contentIds": {}}
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return err
		}
		inHeaders := false
		for _, h := range l.Headers {
			inHeaders = inHeaders || strings.HasPrefix(h.Key, "apicurio.") && strings.HasSuffix(h.Key, "Id")
		}
		for _, b64 := range []*string{l.KeyB64, l.ValueB64} {
			if b64 == nil || inHeaders {
				continue
			}
			b, _ := base64.StdEncoding.DecodeString(*b64)
			if space, id, ok := payloadID(b); ok {
				ids[space][id] = true
			}
		}
		for _, h := range l.Headers {
			b, _ := base64.StdEncoding.DecodeString(h.ValueB64)
			switch {
			case len(b) != 8:
			case strings.HasSuffix(h.Key, ".globalId"):
				ids["globalIds"][int64(binary.BigEndian.Uint64(b))] = true
			case strings.HasSuffix(h.Key, ".contentId"):
				ids["contentIds"][int64(binary.BigEndian.Uint64(b))] = true
			}
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	schemas := map[string]map[string]schema{}
	for space, set := range ids {
		schemas[space] = map[string]schema{}
		for id := range set {
			s, err := fetch(ctx, registry, space, id)
			if err != nil {
				return err
			}
			schemas[space][strconv.FormatInt(id, 10)] = s
		}
	}
	b, err := json.MarshalIndent(schemas, "", " ")
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "cdcjoin-capture: %d records to %s, schemas of %d+%d+%d ids to %s\n",
		len(lines), out, len(ids["confluent"]), len(ids["globalIds"]), len(ids["contentIds"]), schemasOut)
	return os.WriteFile(schemasOut, append(b, '\n'), 0o644)
}

// payloadID reads the id of a Schema Registry wire-format payload: the
// Confluent form (magic 0, 4-byte id) or Apicurio's 8-byte global id
// (magic 0, 8-byte id; its first four bytes are 0 for any id below 2^32,
// and no Confluent id is 0).
func payloadID(b []byte) (string, int64, bool) {
	if len(b) < 5 || b[0] != 0 {
		return "", 0, false
	}
	if id := binary.BigEndian.Uint32(b[1:5]); id != 0 {
		return "confluent", int64(id), true
	}
	if len(b) < 9 {
		return "", 0, false
	}
	return "globalIds", int64(binary.BigEndian.Uint64(b[1:9])), true
}

func fetch(ctx context.Context, root, space string, id int64) (schema, error) {
	url := fmt.Sprintf("%s/apis/registry/v3/ids/%s/%d", root, space, id)
	if space == "confluent" {
		url = fmt.Sprintf("%s/apis/ccompat/v7/schemas/ids/%d", root, id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return schema{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return schema{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return schema{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return schema{}, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	if space == "confluent" {
		var s schema
		err := json.Unmarshal(body, &s)
		return s, err
	}
	t := resp.Header.Get("X-Registry-ArtifactType")
	if t == "" {
		t = "AVRO"
	}
	return schema{SchemaType: t, Schema: string(body)}, nil
}
