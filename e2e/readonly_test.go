package e2e_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// A database that takes no writes — a primary fenced read-only, or a
// standby the service's address reaches during a failover — is told as an
// unreachable one is: every webhook is answered 503 (the provider retries),
// never 500; the service says so once, at ERROR (the sessions the switch
// ended may first read as the database unreachable), and nothing warns;
// /readyz answers 503; reads go on. Once it takes writes again the service
// resumes by itself, and the payment announced meanwhile is applied once.
func TestReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.DB(t)
	sink := &logSink{}
	s := startService(t, dbURL, nil, slog.New(slog.NewJSONHandler(sink, nil)))
	ctx := context.Background()
	var name string
	if err := s.db.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	readOnly := func(on bool) {
		t.Helper()
		admin, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = admin.Close(ctx) }()
		stmt := "ALTER DATABASE " + pgx.Identifier{name}.Sanitize() + " RESET default_transaction_read_only"
		if on {
			stmt = "ALTER DATABASE " + pgx.Identifier{name}.Sanitize() + " SET default_transaction_read_only = on"
		}
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
			t.Fatal(err)
		}
	}
	o := s.createOrder(t, "live", "ro-1")
	paid := event(yolfi.TypePaymentConfirmed, "ro-1", "inv_ro1")

	readOnly(true)
	var during []int
	for deadline := time.Now().Add(10 * time.Second); ; {
		code := s.send(t, liveEP, liveSecret, paid)
		during = append(during, code)
		if code == http.StatusServiceUnavailable && len(during) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, code := range during {
		// The first may meet a connection the switch ended: also 503.
		if code != http.StatusServiceUnavailable {
			t.Errorf("webhook %d with the database read-only answered %d, want 503 (answers %v)", i, code, during)
		}
	}
	if code, body := readyz(t, s.restURL); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the database read-only: %d %s, want 503", code, body)
	}
	if _, err := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: o.GetId()}); err != nil {
		t.Errorf("GetOrder with the database read-only: %v, want the order (reads go on)", err)
	}
	time.Sleep(2 * time.Second) // the queues, listeners and liveness retry meanwhile
	var said []string
	for _, l := range sink.lines() {
		if strings.Contains(l, `"msg":"database read-only`) {
			said = append(said, l)
		} else if strings.Contains(l, `"level":"WARN"`) {
			t.Errorf("with the database read-only, a warning besides the line saying so: %s", l)
		}
	}
	if len(said) != 1 || !strings.Contains(said[0], `"level":"ERROR"`) {
		t.Errorf("lines saying the database is read-only: %q; want one, at ERROR", said)
	}

	readOnly(false)
	back := time.Now()
	for {
		code := s.send(t, liveEP, liveSecret, paid)
		if code == http.StatusOK {
			break
		}
		if time.Since(back) > 10*time.Second {
			t.Fatalf("still %d ten seconds after the database took writes again", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.send(t, liveEP, liveSecret, paid) // a redelivery
	s.settle(t)
	if e := s.effects(t, o.GetId()); e.State != "fulfilled" || e.Licenses != 2 || e.Credits != 1 || e.Attempts != 1 || len(e.Items) != 0 {
		t.Errorf("after the read-only spell: %v; want fulfilled once (2 licenses, 1 credit, 1 attempt, no items)", e)
	}
	waitFor(t, "the log saying the database takes writes again", func() bool {
		for _, l := range sink.lines() {
			if strings.Contains(l, `"msg":"database takes writes again"`) {
				return true
			}
		}
		return false
	})
}
