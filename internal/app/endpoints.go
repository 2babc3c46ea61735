package app

import (
	"fmt"
	"strings"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
	"github.com/fulfillplatform/fulfillment/ingest/providers"
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
	return eps, nil
}

// CheckConfig checks what config.Load leaves to the providers: it builds
// every endpoint and drops them.
func CheckConfig(cfg *config.Config) error {
	_, err := Endpoints(cfg)
	return err
}
