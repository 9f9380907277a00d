package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClientTLS: a CA bundle and a client key pair load (both sections);
// a missing file, a file without PEM certificates and a certificate without
// its key are errors naming the setting.
func TestClientTLS(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cdcjoin-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	crt := write("c.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	kf := write("k.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	junk := write("junk.pem", []byte("not a certificate"))

	k := KafkaTLS{Enabled: true, CAFile: crt, CertFile: crt, KeyFile: kf}
	tc, err := k.ClientConfig()
	if err != nil || tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.MinVersion != tls.VersionTLS12 {
		t.Fatalf("kafka: %+v, %v", tc, err)
	}
	c := ClickHouseTLS{Enabled: true, CAFile: crt}
	if tc, err := c.ClientConfig(); err != nil || tc.RootCAs == nil {
		t.Fatalf("clickhouse: %v", err)
	}
	for _, tc := range []struct {
		t    KafkaTLS
		want string
	}{
		{KafkaTLS{CAFile: filepath.Join(dir, "missing.pem")}, "kafka.tls.ca_file"},
		{KafkaTLS{CAFile: junk}, "no PEM certificates"},
		{KafkaTLS{CertFile: crt, KeyFile: junk}, "kafka.tls client certificate"},
	} {
		if _, err := tc.t.ClientConfig(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.t, err, tc.want)
		}
	}
	if _, err := (&ClickHouseTLS{CAFile: junk}).ClientConfig(); err == nil || !strings.Contains(err.Error(), "clickhouse.tls.ca_file") {
		t.Errorf("clickhouse junk CA: %v", err)
	}
}
