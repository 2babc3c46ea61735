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
