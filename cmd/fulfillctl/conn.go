package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// conn holds how to reach fulfillmentd.
type conn struct {
	addr, tokenFile, caFile string
	tls                     bool
}

// client dials fulfillmentd and returns a context carrying the token.
func (c *conn) client(ctx context.Context) (fulfillmentv1.FulfillmentServiceClient, context.Context, func(), error) {
	token := os.Getenv("FULFILLCTL_TOKEN")
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("reading token: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return nil, nil, nil, fmt.Errorf("the token file %s (--token-file, $FULFILLCTL_TOKEN_FILE) is empty: write the bearer token in it", c.tokenFile)
		}
	}
	if token == "" {
		return nil, nil, nil, errors.New("no token: pass --token-file FILE, or set $FULFILLCTL_TOKEN_FILE or $FULFILLCTL_TOKEN")
	}
	if err := c.checkAddr(); err != nil {
		return nil, nil, nil, err
	}
	creds := insecure.NewCredentials()
	if c.tls {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.caFile != "" {
			pem, err := os.ReadFile(c.caFile)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("reading CA file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, nil, nil, fmt.Errorf("no certificate in %s", c.caFile)
			}
		}
		creds = credentials.NewTLS(cfg)
	}
	cc, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connecting to %s: %w", c.addr, err)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	return fulfillmentv1.NewFulfillmentServiceClient(cc), ctx, func() { _ = cc.Close() }, nil
}

// checkAddr refuses an address with a scheme gRPC does not resolve, such
// as http://127.0.0.1:9090: gRPC would take it for a host name, and fail
// with "too many colons in address". A resolver's scheme (dns:///,
// unix://) is gRPC's own and stays.
func (c *conn) checkAddr() error {
	scheme, _, ok := strings.Cut(c.addr, "://")
	if !ok || resolver.Get(scheme) != nil {
		return nil
	}
	fix := ""
	if u, err := url.Parse(c.addr); err == nil && u.Host != "" {
		fix = ": use " + u.Host
		if scheme == "https" && !c.tls {
			fix += " with --tls"
		}
	}
	return fmt.Errorf("--addr %q: FULFILLCTL_ADDR (--addr) is host:port, without a scheme%s", c.addr, fix)
}
