package daemon

import (
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/config"
)

// WriteConfig writes cfg to path as the YAML file of a child fulfillmentd.
// Secrets must be references (token_env, an endpoint secret's env): values
// are never written.
func WriteConfig(path string, cfg *config.Config) error {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding the configuration: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing the configuration: %w", err)
	}
	return nil
}

// YolfiEndpoint is a Yolfi endpoint of org whose signing secret is in the
// environment variable secretEnv.
func YolfiEndpoint(id, org, environment, secretEnv string) config.Endpoint {
	return config.Endpoint{ID: id, Provider: "yolfi", Org: org, Environment: environment,
		Secrets: []config.Secret{{Env: secretEnv}}}
}

// TBankEndpoint is a T-Bank endpoint of org for terminal, whose password
// is in the environment variable passwordEnv.
func TBankEndpoint(id, org, environment, passwordEnv, terminal string) config.Endpoint {
	var options yaml.Node
	if err := options.Encode(map[string]string{"terminal_key": terminal}); err != nil {
		panic(err) // a map of strings always encodes
	}
	return config.Endpoint{ID: id, Provider: "tbank", Org: org, Environment: environment,
		Secrets: []config.Secret{{Env: passwordEnv}}, Options: options}
}

// EnvToken is a bearer token read from the environment variable env.
func EnvToken(name, env string, orgs []string, scopes ...string) config.Token {
	return config.Token{Name: name, TokenEnv: env, Scopes: scopes, Orgs: orgs}
}
