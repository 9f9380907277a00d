package peers

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	usersTopic   = "dbserver1.public.users"
	domainsTopic = "dbserver1.public.domains"
)

func writeLines(t *testing.T, path string, lines ...string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestWriteInput(t *testing.T) {
	dir := t.TempDir()
	in := writeLines(t, filepath.Join(dir, "in.jsonl"),
		`{"topic":"dbserver1.public.users","partition":1,"offset":0,"key":{"id":1},"value":{"before":null,"after":{"id":1,"firstname":"A","lastname":"B"},"source":{"lsn":1},"op":"r"}}`,
		// schemas on: unwrapped, the key's payload becomes the missing before image
		`{"topic":"dbserver1.public.domains","partition":0,"offset":0,"key":{"schema":{"type":"struct"},"payload":{"id":7}},"value":{"schema":{"type":"struct"},"payload":{"before":null,"after":{"id":7,"user_id":1,"domain_name":"x"},"op":"u"}}}`,
		`{"topic":"dbserver1.public.domains","partition":0,"offset":1,"key":{"id":7},"value":{"before":{"id":7,"user_id":0,"domain_name":null},"after":null,"op":"d"}}`,
		`{"topic":"dbserver1.public.domains","partition":0,"offset":2,"key":{"id":7},"value":null}`,
	)
	got, err := WriteInput([]string{in}, usersTopic, domainsTopic, filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Records != 4 || got.Tombstones != 1 || got.FilledBefore != 1 || got.Bytes == 0 {
		t.Fatalf("counts: %+v", got)
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if u := read(filepath.Join(got.ParentDir, "part-1.json")); u != `{"before":null,"after":{"id":1,"firstname":"A","lastname":"B"},"source":{"lsn":1},"op":"r"}`+"\n" {
		t.Fatalf("users copied as is, got %q", u)
	}
	want := `{"before":{"id":7},"after":{"id":7,"user_id":1,"domain_name":"x"},"op":"u"}` + "\n" +
		`{"before":{"id":7,"user_id":0,"domain_name":null},"after":null,"op":"d"}` + "\n"
	if d := read(filepath.Join(got.ChildDir, "part-0.json")); d != want {
		t.Fatalf("domains:\n got %q\nwant %q", d, want)
	}
}

func TestWriteInputRejects(t *testing.T) {
	for name, line := range map[string]string{
		"toast":    `{"topic":"dbserver1.public.users","partition":0,"offset":0,"key":{"id":1},"value":{"before":null,"after":{"id":1,"firstname":"__debezium_unavailable_value"},"op":"u"}}`,
		"truncate": `{"topic":"dbserver1.public.users","partition":0,"offset":0,"key":null,"value":{"before":null,"after":null,"op":"t"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			in := writeLines(t, filepath.Join(dir, "in.jsonl"), line)
			_, err := WriteInput([]string{in}, usersTopic, domainsTopic, filepath.Join(dir, "out"))
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "offset 0") {
				t.Fatalf("want ErrUnsupported naming the record, got %v", err)
			}
		})
	}
	dir := t.TempDir()
	in := writeLines(t, filepath.Join(dir, "in.jsonl"), `{"topic":"other","partition":0,"offset":0,"key":{"id":1},"value":null}`)
	if _, err := WriteInput([]string{in}, usersTopic, domainsTopic, filepath.Join(dir, "out")); err == nil || !strings.Contains(err.Error(), `"other"`) {
		t.Fatalf("want an error naming the topic, got %v", err)
	}
}

func TestCompareFinal(t *testing.T) {
	dir := t.TempDir()
	a := writeLines(t, filepath.Join(dir, "a"),
		`{"user_id":1,"firstname":"\u00e9\"","domain_id":2}`,
		`{"user_id":1,"firstname":"x","domain_id":3}`,
		`{"user_id":1,"firstname":"x","domain_id":3}`)
	b := writeLines(t, filepath.Join(dir, "b"),
		`{"domain_id":3,"user_id":1,"firstname":"x"}`,
		``,
		`{"domain_id":2, "firstname":"é\"", "user_id":1}`,
		`{"domain_id":3,"user_id":1,"firstname":"x"}`)
	d, err := CompareFinal(a, b)
	if err != nil || !d.Equal() || d.RowsA != 3 || d.RowsB != 3 {
		t.Fatalf("equal files: %v %v", d, err)
	}
	c := writeLines(t, filepath.Join(dir, "c"),
		`{"user_id":1,"firstname":"x","domain_id":3}`,
		`{"user_id":1,"firstname":"y","domain_id":4}`)
	d, err = CompareFinal(a, c)
	if err != nil || d.Equal() || d.OnlyA != 2 || d.OnlyB != 1 || len(d.Examples) != 3 {
		t.Fatalf("different files: %+v %v", d, err)
	}
}

// TestWriteChainInput: three topics into three directories; a fourth is
// an error naming its topic, partition and offset.
func TestWriteChainInput(t *testing.T) {
	dir := t.TempDir()
	const records = "dbserver1.public.dns_records"
	in := writeLines(t, filepath.Join(dir, "in.jsonl"),
		`{"topic":"dbserver1.public.users","partition":0,"offset":0,"key":{"id":1},"value":{"before":null,"after":{"id":1,"firstname":"A","lastname":"B"},"op":"r"}}`,
		`{"topic":"dbserver1.public.domains","partition":1,"offset":0,"key":{"id":7},"value":{"before":null,"after":{"id":7,"user_id":1,"domain_name":"x"},"op":"r"}}`,
		`{"topic":"dbserver1.public.dns_records","partition":2,"offset":0,"key":{"id":9},"value":{"before":null,"after":{"id":9,"domain_id":7,"rtype":"A","ttl":300},"op":"u"}}`,
	)
	got, err := WriteChainInput([]string{in}, usersTopic, domainsTopic, records, filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Records != 3 || got.FilledBefore != 1 || got.RecordsDir == "" {
		t.Fatalf("counts: %+v", got)
	}
	b, err := os.ReadFile(filepath.Join(got.RecordsDir, "part-2.json"))
	if err != nil || string(b) != `{"before":{"id":9},"after":{"id":9,"domain_id":7,"rtype":"A","ttl":300},"op":"u"}`+"\n" {
		t.Fatalf("dns_records: %q %v", b, err)
	}
	for _, d := range []string{got.ParentDir, got.ChildDir} {
		if ents, err := os.ReadDir(d); err != nil || len(ents) != 1 {
			t.Fatalf("%s: %v %v", d, ents, err)
		}
	}
	bad := writeLines(t, filepath.Join(dir, "bad.jsonl"),
		`{"topic":"dbserver1.public.registrars","partition":4,"offset":5,"key":{"id":1},"value":null}`)
	_, err = WriteChainInput([]string{bad}, usersTopic, domainsTopic, records, filepath.Join(dir, "out2"))
	if err == nil || !strings.Contains(err.Error(), `"dbserver1.public.registrars"`) || !strings.Contains(err.Error(), "partition 4 offset 5") {
		t.Fatalf("want an error naming the topic, partition and offset, got %v", err)
	}
}
