package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fulfillplatform/fulfillment/config"
)

// clientCredentials builds the transport credentials for an upstream.
func clientCredentials(up config.Upstream) (credentials.TransportCredentials, error) {
	if !up.TLS {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if up.CAFile != "" {
		pem, err := os.ReadFile(up.CAFile)
		if err != nil {
			return nil, fmt.Errorf("config: ingest.upstream.ca_file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("config: ingest.upstream.ca_file: no certificate in %s", up.CAFile)
		}
	}
	return credentials.NewTLS(cfg), nil
}
