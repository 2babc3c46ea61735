package app_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/internal/app"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// What only a provider knows of its endpoints — its name, its secrets'
// length, its options — is checked when the endpoints are built (serve,
// ingest, config check), each error naming the key.
func TestEndpointErrors(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"OTHER": "other-secret-0123456789"}
	for _, tc := range []struct {
		name, yaml string
		vars       map[string]string
		want       string
	}{
		{"unknown endpoint option", "endpoints: [ { id: ep, provider: yolfi, org: org_a, environment: live, secrets: [ { env: OTHER } ], options: { terminal_key: T1 } } ]\n", vars, `config: endpoints[0].options: line 1: unknown option "terminal_key"`},
		{"tbank endpoint without terminal", "endpoints: [ { id: tb, provider: tbank, org: org_a, environment: live, secrets: [ { env: OTHER } ] } ]\n", vars, "config: endpoints[0].options: terminal_key is required"},
		{"tbank password as an option", "endpoints: [ { id: tb, provider: tbank, org: org_a, environment: live, secrets: [ { env: OTHER } ], options: { terminal_key: T1, password: x } } ]\n", vars, `config: endpoints[0].options: line 1: unknown option "password"`},
		{"tbank unknown policy", "endpoints: [ { id: tb, provider: tbank, org: org_a, environment: live, secrets: [ { env: OTHER } ], options: { terminal_key: T1, duplicate_order_policy: retry } } ]\n", vars, "config: endpoints[0].options: duplicate_order_policy must be fail, ignore or reuse"},
		{"tbank recurrent not a boolean", "endpoints: [ { id: tb, provider: tbank, org: org_a, environment: live, secrets: [ { env: OTHER } ], options: { terminal_key: T1, recurrent: sometimes } } ]\n", vars, "config: endpoints[0].options: recurrent: line 1: cannot unmarshal !!str `sometimes` into bool"},
		{"unknown provider", "endpoints: [ { id: ep, provider: paypal, org: org_a, environment: live, secrets: [ { env: OTHER } ] } ]\n", vars, `config: endpoints[0].provider: "paypal" is not one of yolfi`},
		{"short yolfi secret", "endpoints: [ { id: ep, provider: yolfi, org: org_a, environment: live, secrets: [ { env: PASSWORD } ] } ]\n", map[string]string{"PASSWORD": "Dfsfh56dgKl"}, "config: endpoints[0].secrets[0]: a yolfi signing secret must be at least 16 characters"},
		{"tbank api url", "endpoints: [ { id: tb, provider: tbank, org: org_a, environment: live, secrets: [ { env: OTHER } ], options: { terminal_key: T1, api_url: \"securepay.tinkoff.ru\" } } ]\n", vars, "config: endpoints[0].options: api_url: must be an absolute http:// or https:// URL"},
		{"tbank notification url with credentials", "endpoints: [ { id: tb, provider: tbank, org: org_a, environment: live, secrets: [ { env: OTHER } ], options: { terminal_key: T1, notification_url: \"https://u:p@hooks.example/\" } } ]\n", vars, "config: endpoints[0].options: notification_url: must not hold credentials"},
		{"two orgs binding cards on one terminal", "endpoints: [ { id: tb, provider: tbank, org: org_a, environment: live, secrets: [ { env: OTHER } ], options: { terminal_key: T1, recurrent: true } }, { id: tb2, provider: tbank, org: org_b, environment: live, secrets: [ { env: OTHER } ], options: { terminal_key: T1, recurrent: true } } ]\n", vars, `config: endpoints: "tb" (org org_a, live) and "tb2" (org org_b, live) both bind cards (recurrent) on one terminal_key`},
		{"short tbank password", "endpoints: [ { id: tb, provider: tbank, org: org_a, environment: live, secrets: [ { env: PASSWORD } ], options: { terminal_key: T1 } } ]\n", map[string]string{"PASSWORD": "1234567"}, "config: endpoints[0].secrets[0]: a tbank signing secret must be at least 8 characters"},
	} {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path, env(tc.vars))
		if err != nil {
			t.Errorf("%s: config.Load: %v (the provider's part is checked by app.Endpoints)", tc.name, err)
			continue
		}
		if _, err := app.Endpoints(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// The example's commented T-Bank endpoint, uncommented, loads and reaches
// its adapter.
func TestExampleTBankEndpoint(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "..", "config", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	found := false
	for i := 0; i < len(lines); i++ {
		if lines[i] != "  # - id: tbank-live" {
			continue
		}
		found = true
		for ; i < len(lines) && strings.HasPrefix(lines[i], "  # "); i++ {
			lines[i] = "  " + strings.TrimPrefix(lines[i], "  # ")
		}
		break
	}
	if !found {
		t.Fatal("example.yaml has no commented tbank-live endpoint")
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, env(map[string]string{
		"CHECKOUT_TOKEN":          "checkout-secret-0123456789",
		"OPS_TOKEN":               "ops-secret-0123456789abc",
		"INGEST_TOKEN":            "ingest-secret-0123456789",
		"YOLFI_LIVE_SECRET":       "ywhsec_live_0123456789",
		"TBANK_LIVE_PASSWORD":     "Dfsfh56dgKl", // the bank's own example: 11 characters
		"LICENSES_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"DATABASE_URL":            "postgres://localhost/db",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Endpoints) != 2 || cfg.Endpoints[1].Provider != "tbank" {
		t.Fatalf("endpoints %+v", cfg.Endpoints)
	}
	eps, err := app.Endpoints(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := eps[1].Adapter.(*tbank.Adapter).Options()
	if o.TerminalKey != "1321054611234" || o.DuplicateOrderPolicy != tbank.PolicyFail || len(o.DuplicateOrderCodes) != 0 {
		t.Errorf("options %+v", o)
	}
}
