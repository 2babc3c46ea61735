package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
)

// A process whose queues cannot claim work says so: when its liveness
// session is refused, /readyz answers 503 naming the queues, the gRPC health
// service NOT_SERVING, fulfillment_queue_up 0, and one log line says why —
// within 10 s — while webhooks are still acknowledged. When the session is
// allowed again, it is ready again by itself and processes what it
// acknowledged.
func TestReadinessFollowsQueues(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.DB(t)
	ctx := context.Background()
	admin := pgtest.Conn(t, dbURL)
	// The sessions log in as a role of their own, which the test can stop
	// from logging in while the pool (as postgres) goes on.
	role := "sessions_" + strings.TrimPrefix(pgtest.Database(dbURL), "test_")
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		_, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	u, _ := url.Parse(dbURL)
	u.User = url.User(role)

	sink := &logSink{}
	s := startService(t, dbURL, func(c *config.Config) { c.Database.SessionURL = u.String() },
		slog.New(slog.NewJSONHandler(sink, nil)))
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	health := healthpb.NewHealthClient(conn)

	waitReady := func(want bool, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			code, body := readyz(t, s.restURL)
			st, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
			serving := err == nil && st.GetStatus() == healthpb.HealthCheckResponse_SERVING
			if (code == http.StatusOK) == want && serving == want {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("after %v: /readyz = %d %s, gRPC health = %v (%v); want ready=%v", within, code, body, st.GetStatus(), err, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReady(true, 10*time.Second)
	if got := queueUp(t, s.restURL, "inbox"); got != "1" {
		t.Errorf("fulfillment_queue_up{queue=\"inbox\"} = %q while ready, want 1", got)
	}

	if _, err := admin.Exec(ctx, "ALTER ROLE "+role+" NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role); err != nil {
		t.Fatal(err)
	}
	took := waitReady(false, 10*time.Second)
	t.Logf("not ready %v after the liveness session was refused", took.Round(time.Millisecond))
	code, body := readyz(t, s.restURL)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "inbox") {
		t.Errorf("/readyz = %d %s, want 503 naming the inbox", code, body)
	}
	if strings.Contains(body, role) {
		t.Errorf("/readyz shows the database role: %s", body)
	}
	if got := queueUp(t, s.restURL, "inbox"); got != "0" {
		t.Errorf("fulfillment_queue_up{queue=\"inbox\"} = %q while refused, want 0", got)
	}
	// Acknowledging stays available: the event is stored.
	const orderID = "ready-1"
	s.createOrder(t, "live", orderID)
	s.sendOK(t, event(yolfi.TypePaymentConfirmed, orderID, "inv_r1"))

	time.Sleep(2 * time.Second) // more checks while down: still one line
	var downLines []string
	for _, l := range sink.lines() {
		if strings.Contains(l, "queue cannot claim work") && strings.Contains(l, `"queue":"inbox"`) {
			downLines = append(downLines, l)
		}
	}
	// The cause is what the liveness check met first: its session ended by
	// the terminate, or a new one refused by NOLOGIN.
	if len(downLines) != 1 || (!strings.Contains(downLines[0], "not permitted to log in") &&
		!strings.Contains(downLines[0], "terminating connection due to administrator command")) ||
		!strings.Contains(downLines[0], "webhooks are still acknowledged while the database answers") {
		t.Errorf("log lines saying the inbox cannot claim work: %q; want one, with the cause, saying webhooks are acknowledged only while the database answers", downLines)
	}

	if _, err := admin.Exec(ctx, "ALTER ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	took = waitReady(true, 15*time.Second)
	t.Logf("ready again %v after the session was allowed", took.Round(time.Millisecond))
	if got := queueUp(t, s.restURL, "inbox"); got != "1" {
		t.Errorf("fulfillment_queue_up{queue=\"inbox\"} = %q once allowed again, want 1", got)
	}
	s.settle(t)
	if n := s.count(t, "SELECT count(*) FROM orders WHERE merchant_order_id = $1 AND state = 'fulfilled'", orderID); n != 1 {
		t.Errorf("%d fulfilled orders %s after the queues came back, want 1", n, orderID)
	}
}

func readyz(t *testing.T, restURL string) (code int, body string) {
	t.Helper()
	resp, err := http.Get(restURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("/readyz body %q: %v", b, err)
	}
	return resp.StatusCode, string(b)
}

// queueUp reads fulfillment_queue_up of queue from /metrics.
func queueUp(t *testing.T, restURL, queue string) string {
	t.Helper()
	resp, err := http.Get(restURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	prefix := fmt.Sprintf("fulfillment_queue_up{queue=%q} ", queue)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			return v
		}
	}
	return ""
}

// A binary older than the database's schema — a replica not yet upgraded
// while a newer release's migrations ran, or a binary rolled back — runs
// on it: it is ready (its /readyz says the schema is newer), migrating at
// start leaves the schema alone instead of failing, and it decides
// payments as before.
func TestOlderBinaryOnNewerSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	admin := pgtest.Conn(t, db)
	var latest int
	if err := admin.QueryRow(context.Background(), "UPDATE schema_version SET version = version + 1 RETURNING version - 1").Scan(&latest); err != nil {
		t.Fatal(err)
	}
	s := startReplicaWith(t, db, func(c *config.Config) { c.Database.Migrate = true })
	// Ready once its queues have claimed (a moment after start).
	var (
		code int
		body string
	)
	waitFor(t, "ready", func() bool { code, body = readyz(t, s.restURL); return code == http.StatusOK })
	if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`"schema_version":%d`, latest+1)) ||
		!strings.Contains(body, "newer than this binary") {
		t.Errorf("/readyz = %d %s, want 200 saying the schema is newer", code, body)
	}
	const orderID = "ahead-1"
	order := s.createOrder(t, "live", orderID)
	s.sendOK(t, event(yolfi.TypePaymentConfirmed, orderID, "inv_ahead-1"))
	s.settle(t)
	if e := s.effects(t, order.GetId()); e.State != "fulfilled" || e.Licenses != 2 || e.Credits != 1 {
		t.Errorf("on the newer schema: %v, want fulfilled with the order's two licenses and its credit", e)
	}
	var version int
	if err := admin.QueryRow(context.Background(), "SELECT version FROM schema_version").Scan(&version); err != nil || version != latest+1 {
		t.Errorf("schema version %d (%v) after the older binary started with migrate on, want %d untouched", version, err, latest+1)
	}
}

// notYetCreated names a database of the test's cluster that does not exist
// yet (the test's own with suffix), and its URL; admin, connected to the
// test's database, may create it, and it is dropped when the test ends.
func notYetCreated(t *testing.T, suffix string) (admin *pgx.Conn, name, dbURL string) {
	t.Helper()
	base := pgtest.DB(t)
	admin, err := pgx.Connect(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	name = pgtest.Database(base) + suffix
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		_ = admin.Close(context.Background())
	})
	return admin, name, strings.Replace(base, "/"+pgtest.Database(base), "/"+name, 1)
}

// Told to migrate at start (database.migrate) while its database is not
// there yet, the service starts all the same, as it does without
// migrating: not ready, its queues waiting. Once the database answers, it
// applies the migrations, and then its queues start and decide payments.
// Without migrating at start, its queues wait for someone to migrate.
func TestMigrationsPendingHoldTheQueues(t *testing.T) {
	t.Parallel()
	for _, migrate := range []bool{true, false} {
		t.Run(fmt.Sprintf("migrate at start %v", migrate), func(t *testing.T) {
			t.Parallel()
			admin, name, db := notYetCreated(t, "_later")
			sink := &logSink{}
			cfg := testConfig(db)
			cfg.Database.Migrate = migrate
			cfg.Database.ConnectTimeout = time.Second
			a := runApp(t, cfg, floodLogger(sink), true)
			s := &stack{ingestURL: "http://" + a.IngestAddr(), restURL: "http://" + a.HTTPAddr()}
			if code, body := readyz(t, s.restURL); code != http.StatusServiceUnavailable {
				t.Errorf("/readyz = %d %s before the database exists, want 503", code, body)
			}
			if _, err := admin.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
				t.Fatal(err)
			}
			if !migrate {
				waitFor(t, "a line saying the queues wait", func() bool {
					return strings.Contains(strings.Join(sink.lines(), "\n"), "queues wait for the database's migrations")
				})
				if err := storage.Migrate(context.Background(), db, storage.LockWait{}); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "ready", func() bool { code, _ := readyz(t, s.restURL); return code == http.StatusOK })
			s = stackOf(t, a, db)
			order := s.createOrder(t, "live", "later-1")
			s.sendOK(t, event(yolfi.TypePaymentConfirmed, "later-1", "inv_later-1"))
			s.settle(t)
			if e := s.effects(t, order.GetId()); e.State != "fulfilled" {
				t.Errorf("once migrated: %v, want fulfilled", e)
			}
		})
	}
}

// Told to migrate at start while its database is not there yet, the
// service stops, as it would have at start, when the migrations then fail
// for good (here a table of the same name is in the way), rather than
// trying them again every few seconds.
func TestMigrationsFailingOnceTheDatabaseAnswersStopTheService(t *testing.T) {
	t.Parallel()
	admin, name, db := notYetCreated(t, "_broken")
	cfg := testConfig(db)
	cfg.Database.Migrate = true
	cfg.Database.ConnectTimeout = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New with the database missing: %v, want it to start and migrate later", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	// The database appears with the table in it, at once: made from a
	// template that has it.
	tpl := name + "_tpl"
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+tpl+" WITH (FORCE)") })
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE "+tpl); err != nil {
		t.Fatal(err)
	}
	in, err := pgx.Connect(context.Background(), strings.Replace(db, "/"+name, "/"+tpl, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Exec(context.Background(), "CREATE TABLE orders (nothing int)"); err != nil {
		t.Fatal(err)
	}
	_ = in.Close(context.Background())
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE "+name+" TEMPLATE "+tpl); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "orders") {
			t.Errorf("Run = %v, want the failed migration's error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30 s after its migrations failed")
	}
}
