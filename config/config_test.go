package config

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

const goodYAML = `
listen: { grpc: "127.0.0.1:9090", http: "127.0.0.1:8080", ingest: "127.0.0.1:8081" }
auth:
  tokens:
    - { name: checkout, token_env: CHECKOUT_TOKEN, scopes: [orders:write, orders:read], orgs: [org_a] }
    - { name: ops, token_file: OPS_FILE, scopes: [admin], orgs: ["*"] }
`

func TestLoadValid(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opsFile := filepath.Join(dir, "ops_token")
	if err := os.WriteFile(opsFile, []byte("ops-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(goodYAML, "OPS_FILE", opsFile, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, env(map[string]string{
		"CHECKOUT_TOKEN":          "checkout-secret-0123456789",
		"DATABASE_URL":            "postgres://localhost/db",
		"FULFILLMENT_LISTEN_HTTP": "127.0.0.1:18080",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Auth.Tokens[0].Secret; got != "checkout-secret-0123456789" {
		t.Errorf("token from env = %q", got)
	}
	if got := cfg.Auth.Tokens[1].Secret; got != "ops-secret-0123456789" {
		t.Errorf("token from file = %q (newline must be trimmed)", got)
	}
	if cfg.Listen.HTTP != "127.0.0.1:18080" || cfg.Listen.GRPC != "127.0.0.1:9090" {
		t.Errorf("listen = %+v: env override not applied", cfg.Listen)
	}
	if cfg.Database.URL != "postgres://localhost/db" {
		t.Errorf("database URL = %q", cfg.Database.URL)
	}
	if cfg.Database.ConnectTimeout != 2*time.Second || cfg.Log.Level != "info" {
		t.Errorf("defaults not applied: %+v %+v", cfg.Database, cfg.Log)
	}
}

func TestLoadDefaultsWithoutFile(t *testing.T) {
	t.Parallel()
	cfg, err := Load("", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen.GRPC != DefaultGRPC || cfg.Listen.HTTP != DefaultHTTP || cfg.Listen.Ingest != DefaultIngest {
		t.Errorf("listen = %+v", cfg.Listen)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"CHECKOUT_TOKEN": "checkout-secret-0123456789", "OTHER": "other-secret-0123456789",
		"WHSEC": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "BARE": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	dest := func(fields string) string {
		return "destinations: [ { id: crm, url: \"https://crm.internal/hooks\", secrets: [ { env: WHSEC } ], idempotent: true" + fields + " } ]\n"
	}
	token := `auth: { tokens: [ { name: checkout, token_env: CHECKOUT_TOKEN, scopes: [orders:read], orgs: [org_a] } ] }`
	cases := []struct {
		name, yaml string
		env        map[string]string
		want       string // the one line must contain this
	}{
		{"unknown top-level key", "listne: {}\n", vars, `unknown key "listne"`},
		{"unknown nested key", "listen: { grcp: \":1\" }\n", vars, `unknown key "grcp"`},
		{"bad yaml", "listen: [\n", vars, "line"},
		{"bad address", "listen: { grpc: \"localhost\" }\n", vars, "listen.grpc"},
		{"negative receipt flushers", "inbox: { receipt_flushers: -1 }\n", vars, "inbox.receipt_flushers: from 1 to 16"},
		{"too many receipt flushers", "inbox: { receipt_flushers: 17 }\n", vars, "inbox.receipt_flushers: from 1 to 16"},
		{"negative receipt linger", "inbox: { receipt_linger: -1ms }\n", vars, "inbox.receipt_linger: from 0s (never) to 20ms"},
		{"receipt linger too long", "inbox: { receipt_linger: 1s }\n", vars, "inbox.receipt_linger: from 0s (never) to 20ms"},
		{"receipt linger not a duration", "inbox: { receipt_linger: soon }\n", vars, "receipt_linger"},
		{"bad port", "listen: { http: \"127.0.0.1:99999\" }\n", vars, "listen.http"},
		{"same address twice", "listen: { grpc: \"127.0.0.1:1\", http: \"127.0.0.1:1\" }\n", vars, "different addresses"},
		{"missing env secret", token, map[string]string{}, "auth.tokens[0].token_env: environment variable CHECKOUT_TOKEN is not set"},
		{"missing file secret", `auth: { tokens: [ { name: a, token_file: /nonexistent/tok, scopes: [admin], orgs: ["*"] } ] }`, vars, "auth.tokens[0].token_file"},
		{"inline secret", `auth: { tokens: [ { name: a, token: abc, scopes: [admin], orgs: ["*"] } ] }`, vars, `unknown key "token"`},
		{"no secret reference", `auth: { tokens: [ { name: a, scopes: [admin], orgs: ["*"] } ] }`, vars, "auth.tokens[0]: set token_env or token_file"},
		{"both references", `auth: { tokens: [ { name: a, token_env: OTHER, token_file: /x, scopes: [admin], orgs: ["*"] } ] }`, vars, "only one"},
		{"unknown scope", `auth: { tokens: [ { name: a, token_env: OTHER, scopes: [orders:delete], orgs: ["*"] } ] }`, vars, `auth.tokens[0].scopes[0]: unknown scope "orders:delete"`},
		{"no scopes", `auth: { tokens: [ { name: a, token_env: OTHER, orgs: ["*"] } ] }`, vars, "auth.tokens[0].scopes"},
		{"no orgs", `auth: { tokens: [ { name: a, token_env: OTHER, scopes: [admin] } ] }`, vars, "auth.tokens[0].orgs"},
		{"star with others", `auth: { tokens: [ { name: a, token_env: OTHER, scopes: [admin], orgs: ["*", org_a] } ] }`, vars, "auth.tokens[0].orgs[0]"},
		{"short token", `auth: { tokens: [ { name: a, token_env: SHORT, scopes: [admin], orgs: ["*"] } ] }`, map[string]string{"SHORT": "abc"}, "at least 16"},
		{"duplicate name", `auth: { tokens: [ { name: a, token_env: OTHER, scopes: [admin], orgs: ["*"] }, { name: a, token_env: CHECKOUT_TOKEN, scopes: [admin], orgs: ["*"] } ] }`, vars, `auth.tokens[1].name: "a" is used twice`},
		{"shared token value", `auth: { tokens: [ { name: a, token_env: OTHER, scopes: [admin], orgs: ["*"] }, { name: b, token_env: OTHER, scopes: [admin], orgs: ["*"] } ] }`, vars, "auth.tokens[1]: same token value"},
		{"bad log level", "log: { level: loud }\n", vars, "log.level"},
		{"malformed database URL", "{}\n", map[string]string{"DATABASE_URL": "postgres://fulfillment:hunter2hunter2@[bad/db"},
			"database.url (or DATABASE_URL): not a valid PostgreSQL connection string"},
		{"malformed session URL", "{}\n", map[string]string{"DATABASE_SESSION_URL": "postgres://x:hunter2hunter2@db:notaport/db"},
			"database.session_url (or DATABASE_SESSION_URL): not a valid"},
		{"exit after unreachable too soon", "database: { exit_after_unreachable: 2s }\n", vars, "database.exit_after_unreachable: 0 (never exit) or at least 5s"},
		{"bad migrate override", "", map[string]string{"FULFILLMENT_DATABASE_MIGRATE": "maybe"}, "FULFILLMENT_DATABASE_MIGRATE"},
		{"tls half set", "tls: { cert_file: /x }\n", vars, "tls: set both"},
		{"tls missing file", "tls: { cert_file: /nonexistent/c, key_file: /nonexistent/k }\n", vars, "tls."},
		{"negative http timeout", "http: { read_timeout: -1s }\n", vars, "http.read_timeout: must not be negative"},
		{"body over grpc limit", "http: { max_body_bytes: 8388608 }\n", vars, "http.max_body_bytes: at most grpc.max_recv_bytes"},
		{"receive limit too small", "grpc: { max_recv_bytes: 1048576 }\n", vars, "grpc.max_recv_bytes: at least"},
		{"send limit too small", "grpc: { max_send_bytes: 65536 }\n", vars, "grpc.max_send_bytes: at least"},
		{"page over half the send limit", "grpc: { max_page_bytes: 3000000 }\n", vars, "grpc.max_page_bytes"},
		{"page too small", "grpc: { max_page_bytes: 1000 }\n", vars, "grpc.max_page_bytes"},
		{"webhook body over raw body bound", "ingest: { max_body_bytes: 2097152 }\n", vars, "ingest.max_body_bytes: at most"},
		{"plan without period", "plans: [ { id: pro } ]\n", vars, "plans[0]: a period needs months or days"},
		{"plan id twice", "plans: [ { id: pro, months: 1 }, { id: pro, days: 7 } ]\n", vars, `plans[1].id: "pro" is used twice`},
		{"plan grace too long", "plans: [ { id: pro, months: 1, grace: 2400h } ]\n", vars, "plans[0].grace"},
		{"plan bad id", "plans: [ { id: Pro Monthly, months: 1 } ]\n", vars, "plans[0].id"},
		{"endpoint org no event can carry", "endpoints: [ { id: ep, provider: yolfi, org: \"Org A\", environment: live, secrets: [ { env: OTHER } ] } ]\n", vars, "endpoints[0].org"},
		{"destination without id", "destinations: [ { url: \"http://x\", secrets: [ { env: WHSEC } ], idempotent: true } ]\n", vars, "destinations[0].id: required"},
		{"destination id twice", "destinations: [ { id: a, url: \"http://x\", secrets: [ { env: WHSEC } ], idempotent: true }, { id: a, url: \"http://y\", secrets: [ { env: WHSEC } ], idempotent: true } ]\n", vars, `destinations[1].id: "a" is used twice`},
		{"destination url scheme", "destinations: [ { id: a, url: \"ftp://x\", secrets: [ { env: WHSEC } ], idempotent: true } ]\n", vars, "destinations[0].url: must start with http:// or https://"},
		{"destination url credentials", "destinations: [ { id: a, url: \"https://u:p@x/\", secrets: [ { env: WHSEC } ], idempotent: true } ]\n", vars, "destinations[0].url: must not hold credentials"},
		{"destination url relative", "destinations: [ { id: a, url: \"/hooks\", secrets: [ { env: WHSEC } ], idempotent: true } ]\n", vars, "destinations[0].url"},
		{"destination without secrets", "destinations: [ { id: a, url: \"http://x\", idempotent: true } ]\n", vars, "destinations[0].secrets: at least one"},
		{"destination secret not whsec", "destinations: [ { id: a, url: \"http://x\", secrets: [ { env: OTHER } ], idempotent: true } ]\n", vars, "destinations[0].secrets[0]"},
		{"destination secret bare base64", "destinations: [ { id: a, url: \"http://x\", secrets: [ { env: BARE } ], idempotent: true } ]\n", vars,
			"destinations[0].secrets[0]: stdwebhooks: a signing secret is whsec_ followed by the base64 of its key"},
		{"destination idempotent unstated", "destinations: [ { id: a, url: \"http://x\", secrets: [ { env: WHSEC } ] } ]\n", vars, "destinations[0].idempotent: required"},
		{"destination timeout too long", dest(", timeout: 1h"), vars, "destinations[0].timeout"},
		{"destination negative attempts", dest(", max_attempts: -1"), vars, "destinations[0].max_attempts"},
		{"destination concurrency too high", dest(", concurrency: 1000"), vars, "destinations[0].concurrency"},
		{"destination unknown event", dest(", events: [order.shipped]"), vars, `destinations[0].events[0]: "order.shipped" is not one of order.fulfilled`},
		{"destination event twice", dest(", events: [order.fulfilled, order.fulfilled]"), vars, `destinations[0].events[1]: "order.fulfilled" is listed twice`},
		{"negative outbox poll", "outbox: { poll: -1s }\n", vars, "outbox.poll: must not be negative"},
		{"negative repeat interval", "log: { repeat_interval: -5s }\n", vars, "log.repeat_interval"},
		{"negative inbox lease", "inbox: { lease: -1s }\n", vars, "inbox.lease: must not be negative"},
		{"negative inbox workers", "inbox: { workers: -2 }\n", vars, "inbox.workers: must not be negative"},
		{"inbox batch too large", "inbox: { batch: 1001 }\n", vars, "inbox.batch: at most 1000"},
		{"queue vacuum too often", "database: { queue_vacuum: { interval: 10ms } }\n", vars, "database.queue_vacuum: interval"},
		{"queue vacuum negative dead rows", "database: { queue_vacuum: { dead_rows: -1 } }\n", vars, "database.queue_vacuum"},
		{"negative worker poll (deprecated key)", "worker: { poll: -1s }\n", vars, "worker.poll: must not be negative"},
		{"negative housekeeping sla", "housekeeping: { fulfillment_sla: -1h }\n", vars, "housekeeping: interval, fulfillment_sla"},
		{"housekeeping interval under a second", "housekeeping: { interval: 10ms }\n", vars, "housekeeping.interval: at least 1s"},
		{"raw body retention under a minute", "housekeeping: { raw_body_retention: 30s }\n", vars, "housekeeping.raw_body_retention: at least 1m0s"},
		{"housekeeping batch too large", "housekeeping: { batch: 20000 }\n", vars, "housekeeping.batch: at most 10000"},
		{"housekeeping unknown key", "housekeeping: { retention: 1h }\n", vars, `unknown key "retention"`},
		{"trusted proxy not an address", "console: { trusted_proxies: [10.0.0.0/8, proxy.internal] }\n", vars, `console.trusted_proxies[1]: "proxy.internal" is neither`},
		{"trusted proxy with a zone", "console: { trusted_proxies: ['fe80::1%eth0'] }\n", vars, `console.trusted_proxies[0]`},
		{"too many trusted proxies", "console: { trusted_proxies: [" + strings.Repeat("10.0.0.1, ", 64) + "10.0.0.2] }\n", vars, "console.trusted_proxies: 65 entries, at most 64"},
		{"unknown inbox key", "inbox: { leese: 1s }\n", vars, `unknown key "leese"`},
		{"inbox and worker", "inbox: { workers: 2 }\nworker: { workers: 3 }\n", vars, "worker: the deprecated name of inbox: set only inbox"},
		{"empty inbox and worker", "inbox: {}\nworker: { workers: 3 }\n", vars, "set only inbox"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path, env(tc.env))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			if !strings.HasPrefix(msg, "config "+path+": ") {
				t.Errorf("error %q does not name the file", msg)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not contain %q", msg, tc.want)
			}
			for _, secret := range tc.env {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q reveals a secret", msg)
				}
			}
		})
	}
}

// A collector's URL may hold credentials: one the exporter cannot use is
// refused without quoting it. The OTLP/gRPC exporter sends no credentials
// from the URL, and prints a URL it cannot parse, whole, on stderr.
func TestOTLPEndpointCredentialsRefusedUnquoted(t *testing.T) {
	t.Parallel()
	const secret = "OTLPPASS_s3cr3t"
	for _, v := range []string{
		"https://user:" + secret + "@collector.internal:4317",
		"https://user:" + secret + "@collector.internal:%zz",
		"user:" + secret + "@collector.internal:4317",
	} {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte("tracing: { otlp_endpoint: \""+v+"\" }\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path, env(nil))
		switch {
		case err == nil:
			t.Errorf("%s: loaded, want tracing.otlp_endpoint refused", v)
		case !strings.Contains(err.Error(), "tracing.otlp_endpoint"), strings.Contains(err.Error(), secret):
			t.Errorf("%s: %v; want tracing.otlp_endpoint named, the value not quoted", v, err)
		}
	}
	for _, v := range []string{"otel-collector:4317", "http://127.0.0.1:4317", "https://collector.internal:4317"} {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte("tracing: { otlp_endpoint: \""+v+"\" }\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path, env(nil)); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
}

// A connection string naming a certificate file that is not on this
// machine (config check runs where the service may not) is not called
// malformed: the service reads the file where it runs.
func TestDatabaseURLNamingAMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := "postgres://fulfillment@db.internal:5432/fulfillment?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"
	if _, err := Load(path, env(map[string]string{"DATABASE_URL": url})); err != nil {
		t.Errorf("Load = %v, want the URL accepted", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load("/nonexistent/config.yaml", env(nil))
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/config.yaml") {
		t.Errorf("Load(missing) = %v", err)
	}
}

// The shipped example loads as it is, with the environment it names, and
// states the real defaults of the listener bounds.
func TestExampleLoads(t *testing.T) {
	t.Parallel()
	cfg, err := Load("example.yaml", env(map[string]string{
		"CHECKOUT_TOKEN":          "checkout-secret-0123456789",
		"OPS_TOKEN":               "ops-secret-0123456789abc",
		"INGEST_TOKEN":            "ingest-secret-0123456789",
		"YOLFI_LIVE_SECRET":       "ywhsec_live_0123456789",
		"LICENSES_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"DATABASE_URL":            "postgres://localhost/db",
	}))
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := Load("", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP != defaults.HTTP || cfg.GRPC != defaults.GRPC || cfg.Log != defaults.Log || cfg.Listen != defaults.Listen {
		t.Errorf("the example's values differ from the defaults:\nexample  %+v %+v %+v %+v\ndefaults %+v %+v %+v %+v",
			cfg.HTTP, cfg.GRPC, cfg.Log, cfg.Listen, defaults.HTTP, defaults.GRPC, defaults.Log, defaults.Listen)
	}
	if cfg.Worker != nil || cfg.Inbox.Workers != 4 || cfg.Inbox.Lease != 30*time.Second {
		t.Errorf("the example's inbox = %+v (worker key used: %v), want inbox with the defaults", cfg.Inbox, cfg.Worker != nil)
	}
	if d, ok := cfg.Destination("licenses"); !ok || d.Timeout != DefaultDestinationTimeout ||
		d.MaxAttempts != DefaultDestinationAttempts || d.Concurrency != DefaultDestinationConcurrency || len(d.Keys) != 1 {
		t.Errorf("the example's destination = %+v, want the defaults stated", d)
	}
	if got := cfg.StatusPoll.WithDefaults(); got != defaults.StatusPoll.WithDefaults() || got.After != 10*time.Minute {
		t.Errorf("the example's status_poll = %+v, want the defaults stated", got)
	}
	if got := cfg.Housekeeping.WithDefaults(); got != defaults.Housekeeping.WithDefaults() || got.Disabled ||
		got != (Housekeeping{Interval: time.Minute, FulfillmentSLA: time.Hour, RawBodyRetention: 30 * 24 * time.Hour, Batch: 1000}) {
		t.Errorf("the example's housekeeping = %+v, want the defaults stated", got)
	}
	if got := cfg.Console.WithDefaults(); *got.Enabled != *defaults.Console.WithDefaults().Enabled ||
		got.SessionTTL != defaults.Console.WithDefaults().SessionTTL || cfg.Console.Enabled == nil || cfg.Console.SessionTTL == 0 ||
		len(got.TrustedProxies) != 0 {
		t.Errorf("the example's console = %+v, want every key, at its default", cfg.Console)
	}
	if p, ok := cfg.Plan("pro-monthly"); !ok || p.Period != (fulfillment.Period{Months: 1}) || p.Grace != DefaultPlanGrace {
		t.Errorf("the example's plan = %+v, %v; want monthly with the default grace", p, ok)
	}
	if plans := cfg.DomainPlans(); len(plans) != len(cfg.Plans) || plans["pro-monthly"].Period != (fulfillment.Period{Months: 1}) {
		t.Errorf("the example's DomainPlans = %+v, want every plan by id", plans)
	}
	if len(cfg.Auth.Tokens) != 3 || len(cfg.Endpoints) != 1 || cfg.Ingest.Upstream.Addr == "" {
		t.Errorf("example config = %+v", cfg)
	}
	// The upstream token is resolved by fulfillmentd ingest only.
	if cfg.Ingest.Upstream.Token != "" {
		t.Error("Load resolved ingest.upstream's token")
	}
	up := cfg.Ingest.Upstream
	if err := up.ResolveToken(env(map[string]string{"INGEST_TOKEN": "ingest-secret-0123456789"})); err != nil || up.Token != "ingest-secret-0123456789" {
		t.Errorf("ResolveToken: %v, token %q", err, up.Token)
	}
}

// serve and migrate do not need what only ingest uses: an upstream whose
// token is missing loads, and fails only when the ingest command resolves it.

func TestUpstreamTokenResolvedOnlyForIngest(t *testing.T) {
	t.Parallel()
	yaml := "ingest: { upstream: { addr: \"up:9090\", token_file: /nonexistent/token } }\n"
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, env(nil))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	err = cfg.Ingest.Upstream.ResolveToken(env(nil))
	if err == nil || !strings.Contains(err.Error(), "ingest.upstream.token_file") {
		t.Errorf("ResolveToken: %v, want an error naming ingest.upstream.token_file", err)
	}
}

// The inbox processor is configured under inbox; the former key, worker,
// still works the same, and stays set so that serve warns about it.
func TestInboxQueueKeys(t *testing.T) {
	t.Parallel()
	want := Queue{Disabled: true, Workers: 2, Batch: 8, Lease: time.Minute, Poll: 50 * time.Millisecond,
		MaxAttempts: 3, BaseBackoff: 10 * time.Millisecond, MaxBackoff: time.Second}
	const keys = "{ disabled: true, workers: 2, batch: 8, lease: 1m, poll: 50ms, max_attempts: 3, base_backoff: 10ms, max_backoff: 1s }"
	for _, tc := range []struct {
		key        string
		deprecated bool
	}{{"inbox", false}, {"worker", true}} {
		t.Run(tc.key, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tc.key+": "+keys+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := Load(path, env(nil))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Inbox.Queue != want {
				t.Errorf("inbox = %+v, want %+v", cfg.Inbox, want)
			}
			if got := cfg.Worker != nil; got != tc.deprecated {
				t.Errorf("deprecated worker key set = %v, want %v", got, tc.deprecated)
			}
		})
	}
	cfg, err := Load("", env(nil))
	if err != nil || cfg.Inbox != (Inbox{}) || cfg.Worker != nil {
		t.Errorf("without a file: inbox %+v, worker %v, error %v; want the zero queue (worker's defaults)", cfg.Inbox, cfg.Worker, err)
	}
}

// The queue keys that the outbox and the status poller read and ignore
// (each destination sets its own workers and retry budget; a status poll
// claims one payment at a time) still load, with a warning naming where the
// setting lives: a file that set them before they were named must not stop
// an upgraded service. A bad value is refused as before.
func TestIgnoredQueueKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml, warning, err string
	}{
		{"outbox: { workers: 8 }\n", "config: outbox.workers is ignored: set destinations[].concurrency", ""},
		{"outbox: { max_attempts: 3 }\n", "config: outbox.max_attempts is ignored: set destinations[].max_attempts", ""},
		{"outbox: { batch: 10 }\n", "config: outbox.batch is ignored", ""},
		{"status_poll: { batch: 10 }\n", "config: status_poll.batch is ignored", ""},
		{"outbox: { lease: 10s }\n", "", ""},
		{"outbox: { workers: -1 }\n", "", "outbox.workers"},
	} {
		cfg, err := parse([]byte(tc.yaml), env(nil))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one naming %s", tc.yaml, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v, want it loaded", tc.yaml, err)
			continue
		}
		got := cfg.Deprecated()
		switch {
		case tc.warning == "" && len(got) != 0:
			t.Errorf("%q: warnings %q, want none", tc.yaml, got)
		case tc.warning != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.warning)):
			t.Errorf("%q: warnings %q, want one starting %q", tc.yaml, got, tc.warning)
		}
	}
}

// housekeeping.fulfillment_sla is also accepted under its first spelling,
// fulfilment_sla, with a deprecation warning; a file may not set both.
func TestFulfillmentSLASpelling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml       string
		want       time.Duration
		deprecated []string
		err        string
	}{
		{"housekeeping: { fulfillment_sla: 2h }\n", 2 * time.Hour, nil, ""},
		{"housekeeping: { fulfilment_sla: 3h }\n", 3 * time.Hour, []string{DeprecatedSpelling}, ""},
		{"housekeeping: { fulfilment_sla: 3h, fulfillment_sla: 2h }\n", 0, nil, "housekeeping.fulfilment_sla: the deprecated spelling of fulfillment_sla: set only fulfillment_sla"},
		{"worker: { workers: 2 }\nhousekeeping: { fulfilment_sla: 3h }\n", 3 * time.Hour, []string{DeprecatedWorker, DeprecatedSpelling}, ""},
	} {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, env(nil))
		if tc.err != "" {
			if err == nil || !strings.HasSuffix(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
			continue
		}
		if got := cfg.Housekeeping.FulfillmentSLA; got != tc.want {
			t.Errorf("%q: fulfillment_sla = %v, want %v", tc.yaml, got, tc.want)
		}
		if got := cfg.Deprecated(); !slices.Equal(got, tc.deprecated) {
			t.Errorf("%q: deprecations %q, want %q", tc.yaml, got, tc.deprecated)
		}
	}
}

// A destination takes the defaults it leaves out, and its secrets are
// parsed: one key per secret, the published Standard Webhooks one among
// them.
func TestDestinationDefaults(t *testing.T) {
	t.Parallel()
	yaml := `destinations:
  - { id: crm, url: "https://crm.internal/hooks", secrets: [ { env: OLD }, { env: NEW } ], idempotent: false, events: [order.fulfilled] }
  - { id: licenses, url: "http://127.0.0.1:9000/", secrets: [ { env: NEW } ], idempotent: true, timeout: 3s, max_attempts: 5, concurrency: 1 }
`
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, env(map[string]string{
		"OLD": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"NEW": "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX",
	}))
	if err != nil {
		t.Fatal(err)
	}
	crm, ok := cfg.Destination("crm")
	if !ok || *crm.Idempotent || crm.Timeout != DefaultDestinationTimeout || crm.MaxAttempts != DefaultDestinationAttempts ||
		crm.Concurrency != DefaultDestinationConcurrency || len(crm.Keys) != 2 {
		t.Errorf("crm = %+v, want the defaults and two keys", crm)
	}
	lic, ok := cfg.Destination("licenses")
	if !ok || !*lic.Idempotent || lic.Timeout != 3*time.Second || lic.MaxAttempts != 5 || lic.Concurrency != 1 || len(lic.Keys) != 1 {
		t.Errorf("licenses = %+v", lic)
	}
	if _, ok := cfg.Destination("nope"); ok {
		t.Error("an unknown destination was found")
	}
}

// database.session_url is read like database.url: from session_url_env or
// session_url_file, DATABASE_SESSION_URL winning; a reference to nothing is
// an error naming the key.
func TestLoadSessionURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "session_url")
	if err := os.WriteFile(file, []byte("postgres://direct/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, yaml string
		vars       map[string]string
		want, err  string
	}{
		{"none", "database:\n  url_env: DATABASE_URL\n", nil, "", ""},
		{"env", "database:\n  session_url_env: SESS\n", map[string]string{"SESS": "postgres://direct/db"}, "postgres://direct/db", ""},
		{"file", "database:\n  session_url_file: " + file + "\n", nil, "postgres://direct/db", ""},
		{"override", "database:\n  session_url_file: " + file + "\n", map[string]string{EnvSessionURL: "postgres://other/db"}, "postgres://other/db", ""},
		{"unset env", "database:\n  session_url_env: SESS\n", nil, "", "database.session_url_env: environment variable SESS is not set"},
		{"both", "database:\n  session_url_env: SESS\n  session_url_file: " + file + "\n", map[string]string{"SESS": "x"}, "", "set only one of session_url_env and session_url_file"},
	} {
		path := filepath.Join(dir, c.name+".yaml")
		if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		vars := map[string]string{"DATABASE_URL": "postgres://pooler/db"}
		for k, v := range c.vars {
			vars[k] = v
		}
		cfg, err := Load(path, env(vars))
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && cfg.Database.SessionURL != c.want:
			t.Errorf("%s: session URL %q, want %q", c.name, cfg.Database.SessionURL, c.want)
		}
	}
}

// The mistakes the YAML decoder words in its own terms — a duration
// without a Go unit, a tab in the indentation, a line indented to no
// block — are said with their line, their key and the fix; the line is
// the one to change, not where the decoder gave up.
func TestLoadMistakesNameLineKeyAndFix(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, yaml, want string }{
		{"bare integer duration", "listen:\n  grpc: \"127.0.0.1:9090\"\ningest:\n  timeout: 2\n",
			`line 4: ingest.timeout: "2" has no unit; write "2s"`},
		{"zero without unit", "housekeeping: { interval: 1m, fulfillment_sla: 0 }\n",
			`line 1: housekeeping.fulfillment_sla: "0" has no unit; write "0s"`},
		{"fraction without unit", "inbox:\n  poll: 0.5\n", `line 2: inbox.poll: "0.5" has no unit; write "0.5s"`},
		{"days", "plans:\n  - id: pro\n    months: 1\n    grace: 3d\n",
			`line 4: plans[0].grace: "3d": days are not a duration unit (ns, us, ms, s, m, h); write "72h"`},
		{"days and hours", "housekeeping:\n  raw_body_retention: 1d12h\n",
			`line 2: housekeeping.raw_body_retention: "1d12h": days are not a duration unit (ns, us, ms, s, m, h); write "36h"`},
		{"weeks", "plans: [ { id: pro, months: 1 }, { id: team, months: 1, grace: 2w } ]\n",
			`line 1: plans[1].grace: "2w": weeks are not a duration unit (ns, us, ms, s, m, h); write "336h"`},
		{"unit in words", "destinations:\n  - id: crm\n    timeout: 10 sec\n",
			`line 3: destinations[0].timeout: "10 sec" is not a duration; write "10s"`},
		{"no duration at all", "log:\n  repeat_interval: often\n",
			`line 2: log.repeat_interval: "often" is not a duration: write a number with a unit (ns, us, ms, s, m, h), such as "30s", "5m" or "72h"`},
		{"two on one line", "inbox: { lease: 30, poll: 1d }\n",
			`line 1: inbox.lease: "30" has no unit; write "30s"; line 1: inbox.poll: "1d": days are not a duration unit (ns, us, ms, s, m, h); write "24h"`},
		{"tab indentation", "listen:\n\tgrpc: \"127.0.0.1:9090\"\n",
			"line 2: listen.grpc: indented with a tab; YAML indents with spaces only: replace the tab with 2 spaces"},
		{"tab in a list item", "auth:\n  tokens:\n    - name: ops\n\t  scopes: [admin]\n",
			"line 4: auth.tokens[0].scopes: indented with a tab; YAML indents with spaces only: replace the tab with 6 spaces"},
		{"indented too far", "# listeners\nlisten:\n  grpc: \"127.0.0.1:9090\"\n   http: \"127.0.0.1:8080\"\n",
			"line 4: listen.http: indented 3 spaces, which lines it up with no block above it (grpc on line 3 is at 2); indent it 2 spaces, like grpc"},
		{"indented too little", "inbox:\n  workers: 2\n lease: 1s\n",
			"line 3: inbox.lease: indented 1 space, which lines it up with no block above it (workers on line 2 is at 2); indent it 2 spaces, like workers"},
		{"under a value", "log:\n  level: info\n    format: text\n",
			"line 3: log.format: indented 4 spaces, which lines it up with no block above it (level on line 2 is at 2); indent it 2 spaces, like level"},
		{"list item key", "database:\n  max_conns: 3\nauth:\n  tokens:\n  - name: ops\n    token_env: OPS\n    scopes: [admin]\n   orgs: [\"*\"]\n",
			`line 8: auth.tokens[0].orgs: indented 3 spaces, which lines it up with no block above it (scopes on line 7 is at 4); indent it 4 spaces, like scopes`},
		// What is no such mistake keeps the decoder's words: a value
		// continued on the next line is no misplaced key.
		{"unclosed quote", "log:\n  level: info\n  format: \"text\n", "line 3: found unexpected end of stream"},
		{"value on two lines, then a flow list left open", "tracing:\n  service_name: a long\n    name\nlog:\n  level: [\n",
			"line 5: did not find expected node content"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path, env(map[string]string{"OPS": "ops-secret-0123456789"}))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			if want := "config " + path + ": " + tc.want; err.Error() != want {
				t.Errorf("error\n%s\nwant\n%s", err, want)
			}
		})
	}
}

// inbox.receipt_flushers: the number given, or the default when unset.
func TestReceiptFlushers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml string
		want int
	}{{"", DefaultReceiptFlushers}, {"inbox: { receipt_flushers: 3 }\n", 3}} {
		c, err := parse([]byte(tc.yaml), env(nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Inbox.Flushers(); got != tc.want {
			t.Errorf("%q: %d flushers, want %d", tc.yaml, got, tc.want)
		}
	}
}

// inbox.receipt_linger: the duration given, 0s included (never), or the
// default when unset.
func TestReceiptLinger(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml string
		want time.Duration
	}{{"", DefaultReceiptLinger}, {"inbox: { receipt_linger: 0s }\n", 0}, {"inbox: { receipt_linger: 500us }\n", 500 * time.Microsecond}} {
		c, err := parse([]byte(tc.yaml), env(nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Inbox.Linger(); got != tc.want {
			t.Errorf("%q: linger %s, want %s", tc.yaml, got, tc.want)
		}
	}
}

// The configuration make run writes (scripts/dev-config.sh) loads, and the
// banner it prints keeps each command as it is to be pasted: a command
// continued on the next line ends in a backslash, and no continuation is
// joined onto the line before it (an unescaped backslash in the script's
// here-document would join them, leaving a run of blanks inside a line).
func TestDevConfigAndBanner(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not found")
	}
	dir := t.TempDir()
	out, err := exec.Command("bash", "../scripts/dev-config.sh", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("dev-config.sh: %v\n%s", err, out)
	}
	cfg, err := Load(filepath.Join(dir, "config.yaml"), env(map[string]string{"DATABASE_URL": "postgres://localhost/db"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Endpoints) == 0 || len(cfg.Auth.Tokens) == 0 {
		t.Errorf("the dev configuration has %d endpoints and %d tokens, want some of each", len(cfg.Endpoints), len(cfg.Auth.Tokens))
	}
	banner, err := os.ReadFile(filepath.Join(dir, "banner.txt"))
	if err != nil {
		t.Fatal(err)
	}
	command := regexp.MustCompile(`^\s*(curl|\.cache/|FULFILLCTL_|FAKEBANK_|go run)`)
	comment := regexp.MustCompile(`\s+# .*$`)
	continued := 0
	for i, line := range strings.Split(string(banner), "\n") {
		if command.MatchString(line) && strings.Contains(comment.ReplaceAllString(strings.TrimSpace(line), ""), "   ") {
			t.Errorf("banner line %d holds a continuation joined onto it: %q", i+1, line)
		}
		if strings.HasSuffix(line, ` \`) {
			continued++
		}
	}
	if continued == 0 {
		t.Errorf("the banner continues no command on a second line; this test looks at nothing:\n%s", banner)
	}
}
