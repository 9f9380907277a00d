package config

import (
	"strings"
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
)

const formatBase = `name: j
parent: {topic: a, key: id}
child: {topic: b, key: id, parent_key: pid}
select: parent.id, child.id AS cid
state: {dir: /tmp/x}
`

func TestFormatConfig(t *testing.T) {
	c, err := Parse([]byte(formatBase+"format: avro\nschema_registry: {url: http://127.0.0.1:8080/apis/ccompat/v7, basic_auth: {username: u, password: p}}\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.SideFormat(row.Parent) != FormatAvro || c.SideFormat(row.Child) != FormatAvro || !c.NeedsRegistry() || c.SchemaRegistry.BasicAuth.Username != "u" {
		t.Errorf("%+v", c)
	}
	c, err = Parse([]byte(strings.Replace(formatBase, "child: {topic: b,", "child: {topic: b, format: avro,", 1)+"schema_registry: {url: https://sr:8081}\n"), "f.yaml")
	if err != nil || c.SideFormat(row.Parent) != FormatJSON || c.SideFormat(row.Child) != FormatAvro {
		t.Errorf("per side: %v", err)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"format: avro\n", "need schema_registry"},
		{"format: xml\n", `format "xml": use json, avro or protobuf`},
		{"format: avro\nschema_registry: {url: ftp://x}\n", "not an http:// or https:// URL"},
		{"schema_registry: {url: http://x}\n", "no format is avro"},
		{"format: avro\nschema_registry: {url: http://x, tls: {cert_file: /c}}\n", "go together"},
	} {
		_, err := Parse([]byte(formatBase+bad.yaml), "f.yaml")
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.yaml, err, bad.want)
		}
	}
}
