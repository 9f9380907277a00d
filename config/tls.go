package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// ClientConfig is the TLS client configuration of t: the CA bundle (system
// roots when empty), the client certificate, TLS 1.2 at least.
func (t *KafkaTLS) ClientConfig() (*tls.Config, error) {
	return clientTLS("kafka.tls", t.CAFile, t.CertFile, t.KeyFile, t.InsecureSkipVerify)
}

// ClientConfig is the TLS client configuration of t (as KafkaTLS's).
func (t *ClickHouseTLS) ClientConfig() (*tls.Config, error) {
	return clientTLS("clickhouse.tls", t.CAFile, t.CertFile, t.KeyFile, t.InsecureSkipVerify)
}

// clientTLS loads the PEM files of a client's tls section (named section in
// errors).
func clientTLS(section, caFile, certFile, keyFile string, insecure bool) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("cdcjoin: %s.ca_file: %w", section, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cdcjoin: %s.ca_file %s: no PEM certificates", section, caFile)
		}
		tc.RootCAs = pool
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("cdcjoin: %s client certificate: %w", section, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// ClientConfig is the TLS client configuration of t (as KafkaTLS's).
func (t *RegistryTLS) ClientConfig() (*tls.Config, error) {
	return clientTLS("schema_registry.tls", t.CAFile, t.CertFile, t.KeyFile, t.InsecureSkipVerify)
}
