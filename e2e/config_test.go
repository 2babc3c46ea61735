package e2e_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// A service nobody can call says so when it starts, instead of serving in
// silence: no tokens, no webhook endpoints.
func TestWarnsWhenNobodyCanCall(t *testing.T) {
	t.Parallel()
	cfg := testConfig(pgtest.DB(t))
	cfg.Auth.Tokens, cfg.Endpoints = nil, nil
	var logs bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := a.Run(ctx); err != nil { // stops at once, closing its listeners
		t.Fatal(err)
	}
	for _, want := range []string{"no API tokens are configured (auth.tokens)", "no webhook endpoints are configured (endpoints)"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("start-up log lacks %q:\n%s", want, logs.String())
		}
	}
}

// The profiles listener (listen.debug) has no authentication and a heap
// profile holds what the process holds: one bound beyond loopback is
// warned about when the service starts, one on loopback is not.
func TestDebugListenerBeyondLoopbackWarns(t *testing.T) {
	t.Parallel()
	for addr, warns := range map[string]bool{"0.0.0.0:0": true, "127.0.0.1:0": false} {
		cfg := testConfig(pgtest.DB(t))
		cfg.Listen.Debug = addr
		var logs bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		a, err := app.New(ctx, cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		cancel()
		if err := a.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "listen.debug serves Go's profiles, unauthenticated, beyond loopback"); got != warns {
			t.Errorf("listen.debug %s: warned %v, want %v:\n%s", addr, got, warns, logs.String())
		}
	}
}

// A configuration mistake only the providers can see (here a signing
// secret too short for its provider) stops the service before it touches
// the database: with migrations on and a database that cannot be reached,
// the error is the configuration's, not the connection's.
func TestEndpointMistakeBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	cfg := testConfig("postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	cfg.Database.Migrate = true
	cfg.Endpoints[0].Secrets[0].Value = []byte("short")
	_, err := app.New(context.Background(), cfg, slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil)))
	if err == nil || !strings.Contains(err.Error(), "config: endpoints[0].secrets[0]") {
		t.Fatalf("app.New = %v, want the endpoint's secret named before any connection", err)
	}
}
