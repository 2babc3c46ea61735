package app

import (
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
	"github.com/fulfillplatform/fulfillment/ingest/providers"
	"github.com/fulfillplatform/fulfillment/server"
)

// Endpoints builds the configured webhook endpoints, once: each with its
// provider's adapter, which checks what only the provider knows (its
// secrets' length, its own options). The gateway and the payment providers
// share them. Every error names the endpoint's key.
func Endpoints(cfg *config.Config) ([]ingest.Endpoint, error) {
	eps := make([]ingest.Endpoint, len(cfg.Endpoints))
	for i, e := range cfg.Endpoints {
		key := fmt.Sprintf("config: endpoints[%d]", i)
		p, ok := providers.Lookup(fulfillment.Provider(e.Provider))
		if !ok {
			return nil, fmt.Errorf("%s.provider: %q is not one of %s", key, e.Provider, strings.Join(providers.Names(), ", "))
		}
		secrets := make([][]byte, len(e.Secrets))
		for j, s := range e.Secrets {
			if len(s.Value) < p.MinSecretLen {
				return nil, fmt.Errorf("%s.secrets[%d]: a %s signing secret must be at least %d characters", key, j, e.Provider, p.MinSecretLen)
			}
			secrets[j] = s.Value
		}
		adapter, err := p.New(e.Domain(), secrets, &e.Options)
		if err != nil {
			return nil, fmt.Errorf("%s.options: %w", key, err)
		}
		eps[i] = ingest.Endpoint{Endpoint: e.Domain(), Adapter: adapter}
	}
	for _, name := range providers.Names() {
		p, _ := providers.Lookup(fulfillment.Provider(name))
		if p.CheckTogether == nil {
			continue
		}
		var mine []ingest.Endpoint
		for _, e := range eps {
			if e.Provider == p.Name {
				mine = append(mine, e)
			}
		}
		if err := p.CheckTogether(mine); err != nil {
			return nil, fmt.Errorf("config: endpoints: %w", err)
		}
	}
	return eps, nil
}

// CheckConfig checks what config.Load leaves to the providers: it builds
// every endpoint and drops them.
func CheckConfig(cfg *config.Config) error {
	_, err := Endpoints(cfg)
	return err
}

// ServerConfig is the part of cfg the API server acts on, with the
// endpoints built by Endpoints and the listeners' TLS (nil for plain).
func ServerConfig(cfg *config.Config, endpoints []ingest.Endpoint, tlsCfg *tls.Config) server.Config {
	byID := make(map[string]fulfillment.Endpoint, len(endpoints))
	for _, e := range endpoints {
		byID[e.ID] = e.Endpoint
	}
	return server.Config{
		GRPCAddr: cfg.Listen.GRPC, HTTPAddr: cfg.Listen.HTTP,
		GRPC: cfg.GRPC, HTTP: cfg.HTTP, TLS: tlsCfg,
		Tokens:       cfg.Auth.Tokens,
		Endpoints:    byID,
		Plans:        cfg.DomainPlans(),
		Destinations: cfg.Destinations,
	}
}

// LoadTLS reads the configured key pair into the listeners' TLS settings
// (TLS 1.2 at least); without a tls section (nil) the listeners are plain.
func LoadTLS(t *config.TLS) (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading TLS key pair: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
