package daemon

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
)

// What WriteConfig writes is what config.Load reads back.
func TestWriteConfigLoads(t *testing.T) {
	t.Parallel()
	want := &config.Config{
		Listen:   config.Listen{GRPC: "127.0.0.1:1", HTTP: "127.0.0.1:2", Ingest: "127.0.0.1:3"},
		Database: config.Database{URLEnv: "DATABASE_URL", Migrate: true, MaxConns: 7, ConnectTimeout: time.Second},
		Log:      config.Log{Level: "warn"},
		Auth: config.Auth{Tokens: []config.Token{
			EnvToken("admin", "T_ADMIN", []string{"*"}, config.ScopeAdmin),
		}},
		Endpoints: []config.Endpoint{YolfiEndpoint("yolfi-live", "org_a", "live", "T_SECRET"),
			TBankEndpoint("tbank-live", "org_a", "live", "T_TBANK", "TestTerminal")},
		Inbox: config.Inbox{Queue: config.Queue{Workers: 2, Lease: 90 * time.Second, Poll: 50 * time.Millisecond}},
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := WriteConfig(path, want); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"T_ADMIN": "admin-token-0123456789", "T_SECRET": "ywhsec_0123456789abcd", "T_TBANK": "tbank-password", "DATABASE_URL": "postgres://x/y"}
	got, err := config.Load(path, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if got.Listen != want.Listen || got.Database.MaxConns != 7 || !got.Database.Migrate || got.Database.ConnectTimeout != time.Second ||
		got.Log.Level != "warn" || got.Inbox != want.Inbox {
		t.Errorf("loaded %+v\nwrote  %+v", got, want)
	}
	if got.Auth.Tokens[0].Secret != env["T_ADMIN"] || string(got.Endpoints[0].Secrets[0].Value) != env["T_SECRET"] {
		t.Error("secret references were not kept")
	}
	var opts struct {
		TerminalKey string `yaml:"terminal_key"`
	}
	if tb := got.Endpoints[1]; tb.Provider != "tbank" || string(tb.Secrets[0].Value) != env["T_TBANK"] || tb.Options.Decode(&opts) != nil ||
		opts.TerminalKey != "TestTerminal" {
		t.Errorf("T-Bank endpoint loaded as provider %q, terminal %q", tb.Provider, opts.TerminalKey)
	}
}
