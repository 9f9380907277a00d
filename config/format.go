package config

import (
	"fmt"
	"net/url"
	"os"

	"github.com/cdcjoin/cdcjoin/row"
)

// Record formats (Config.Format, Table.Format).
const (
	FormatJSON     = "json"     // Kafka Connect's JsonConverter, schemas on or off (the default)
	FormatAvro     = "avro"     // an Avro converter through a schema registry
	FormatProtobuf = "protobuf" // a Protobuf converter through a schema registry
)

// Formats returns the accepted record formats.
func Formats() []string { return []string{FormatJSON, FormatAvro, FormatProtobuf} }

// SchemaRegistry locates the schema registry that Avro and Protobuf
// records name their schemas in (Config.SchemaRegistry).
type SchemaRegistry struct {
	// URL is the registry's Confluent-compatible API: a Confluent Schema
	// Registry's root, or Apicurio Registry's /apis/ccompat/v7 (its own
	// API, for Apicurio's 8-byte ids and id headers, is found next to
	// it: /apis/registry/v3). Apicurio's /apis/registry/v2 or /v3 is
	// accepted too.
	URL string `yaml:"url"`
	// BasicAuth authenticates with HTTP basic authentication.
	BasicAuth *RegistryBasicAuth `yaml:"basic_auth"`
	// TLS configures https connections (an https URL uses TLS with the
	// system roots without it).
	TLS RegistryTLS `yaml:"tls"`
}

// RegistryBasicAuth is a user name and password.
type RegistryBasicAuth struct {
	Username string `yaml:"username"`
	Password string `yaml:"password"`
}

// RegistryTLS configures TLS to the registry.
type RegistryTLS struct {
	CAFile             string `yaml:"ca_file"`   // PEM CA bundle; system roots when empty
	CertFile           string `yaml:"cert_file"` // client certificate (with KeyFile)
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// SideFormat returns the record format of side's topic: the side's own
// format, else the job's, else json.
func (c *Config) SideFormat(side row.Side) string {
	t, _ := c.table(side)
	switch {
	case t.Format != "":
		return t.Format
	case c.Format != "":
		return c.Format
	}
	return FormatJSON
}

// NeedsRegistry reports whether a side's records name schemas in a
// registry (format avro or protobuf).
func (c *Config) NeedsRegistry() bool {
	return c.SideFormat(row.Parent) != FormatJSON || c.SideFormat(row.Child) != FormatJSON
}

func (c *Config) validateFormat(p *Problems) {
	check := func(v string, path ...string) {
		if v == "" {
			return
		}
		for _, f := range Formats() {
			if v == f {
				return
			}
		}
		c.add(p, fmt.Sprintf("%s %q: use json, avro or protobuf", joinPath(path), v), path...)
	}
	check(c.Format, "format")
	check(c.Parent.Format, "parent", "format")
	check(c.Child.Format, "child", "format")
	r := c.SchemaRegistry
	if r == nil {
		if c.NeedsRegistry() {
			c.add(p, "format avro and protobuf need schema_registry: {url: …} (the registry the converter writes schemas to)", "format")
		}
		return
	}
	if r.URL == "" {
		c.add(p, "schema_registry.url is required (e.g. http://127.0.0.1:8080/apis/ccompat/v7)", "schema_registry", "url")
	} else if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.add(p, fmt.Sprintf("schema_registry.url %q is not an http:// or https:// URL", r.URL), "schema_registry", "url")
	}
	if a := r.BasicAuth; a != nil && a.Username == "" {
		c.add(p, "schema_registry.basic_auth needs a username", "schema_registry", "basic_auth")
	}
	t := &r.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		c.add(p, "schema_registry.tls.cert_file and tls.key_file go together (a client certificate needs its key)", "schema_registry", "tls", "cert_file")
	}
	if t.InsecureSkipVerify && t.CAFile != "" {
		c.add(p, "schema_registry.tls.insecure_skip_verify disables the verification that tls.ca_file configures; use one of them", "schema_registry", "tls", "insecure_skip_verify")
	}
	for _, f := range []struct{ key, path string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			c.add(p, fmt.Sprintf("schema_registry.tls.%s: %v", f.key, err), "schema_registry", "tls", f.key)
		}
	}
	if !c.NeedsRegistry() {
		c.add(p, "schema_registry is set but no format is avro or protobuf; set format: avro (or protobuf), or remove schema_registry", "schema_registry")
	}
}

func joinPath(path []string) string {
	s := ""
	for i, p := range path {
		if i > 0 {
			s += "."
		}
		s += p
	}
	return s
}
