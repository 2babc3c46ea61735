package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

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
	o := s.createOrder(t, "live", "ro-1")
	paid := event(yolfi.TypePaymentConfirmed, "ro-1", "inv_ro1")

	setReadOnly(t, dbURL, true)
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
	// Said at the first refused write, or by the watcher's probe when the
	// sessions the switch ended were told first.
	waitFor(t, "the log saying the database is read-only", sink.said("database read-only"))
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

	setReadOnly(t, dbURL, false)
	s.sendUntilAcked(t, "the database taking writes again", paid, 10*time.Second)
	s.send(t, liveEP, liveSecret, paid) // a redelivery
	s.settle(t)
	if e := s.effects(t, o.GetId()); e.State != "fulfilled" || e.Licenses != 2 || e.Credits != 1 || e.Attempts != 1 || len(e.Items) != 0 {
		t.Errorf("after the read-only spell: %v; want fulfilled once (2 licenses, 1 credit, 1 attempt, no items)", e)
	}
	waitFor(t, "the log saying the database takes writes again", sink.said("database takes writes again"))
}

// The service's address (one host, as a virtual address or a name is)
// reaches the standby: first by mistake while the primary runs (a name
// that flapped), then in a failover before the standby's promotion. While
// the service reaches only a standby, webhooks are answered 503, never 500
// or 200, and /readyz is 503. When the address is back on the primary, the
// service writes again by itself and its queues claim work (that its pools
// keep no connection to a standby is storage's TestReadOnlyDatabase); once
// the standby is promoted, it writes there by itself. The payments
// announced meanwhile are applied once.
func TestAddressReachesTheStandby(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := startFailoverCluster(t, "ro-primary", nil)
	standby := startFailoverCluster(t, "ro-standby", primary)
	waitStreaming(t, primary)
	primaryAddr, standbyAddr := fmt.Sprintf("127.0.0.1:%d", primary.Port()), fmt.Sprintf("127.0.0.1:%d", standby.Port())
	vip := newSilentProxy(t, primaryAddr)
	dbURL := fmt.Sprintf("postgres://postgres@%s/fulfillment?sslmode=disable", vip.addr())
	cfg := testConfig(dbURL)
	cfg.Database.Migrate = true
	sink := &logSink{}
	// The run goes through a database outage on purpose: how it stops is
	// not what this test checks.
	a := runApp(t, cfg, slog.New(slog.NewJSONHandler(sink, nil)), true)
	s := stackOf(t, a, dbURL)
	orders := []*fulfillmentv1.Order{s.createOrder(t, "live", "ro-vip-1"), s.createOrder(t, "live", "ro-vip-2")}
	paid := []yolfi.Payload{
		event(yolfi.TypePaymentConfirmed, "ro-vip-1", "inv_ro_vip_1"),
		event(yolfi.TypePaymentConfirmed, "ro-vip-2", "inv_ro_vip_2"),
	}
	onlyTheStandby := func(what string, p yolfi.Payload) {
		t.Helper()
		var answers []int
		for len(answers) < 5 {
			answers = append(answers, s.send(t, liveEP, liveSecret, p))
			time.Sleep(100 * time.Millisecond)
		}
		for i, code := range answers {
			if code != http.StatusServiceUnavailable {
				t.Errorf("%s: webhook %d answered %d, want 503 (answers %v)", what, i, code, answers)
			}
		}
		waitFor(t, "the log saying the database is read-only", sink.said("database read-only"))
	}

	// A flap: the address reaches the standby, the primary runs on, with
	// the queue liveness held there.
	waitFor(t, "the queue liveness held", sink.said("queue workers live"))
	vip.retarget(standbyAddr)
	vip.drop()
	onlyTheStandby("the address on the standby, the primary running", paid[0])
	if code, body := readyz(t, s.restURL); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the address on the standby: %d %s, want 503", code, body)
	}
	// Long enough for the queue liveness to find its session gone and
	// connect again, through the address, to the standby.
	waitFor(t, "the queue liveness lost with its session", sink.said("queue liveness lost"))
	time.Sleep(1500 * time.Millisecond)
	vip.retarget(primaryAddr)
	s.sendUntilAcked(t, "the address back on the primary", paid[0], 5*time.Second)
	// The queues claim work again too.
	back := time.Now()
	for code, body := readyz(t, s.restURL); code != http.StatusOK; code, body = readyz(t, s.restURL) {
		if time.Since(back) > 10*time.Second {
			t.Fatalf("/readyz ten seconds after the address was back on the primary: %d %s, want 200", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the queues claim again %v after the address was back", time.Since(back).Round(time.Millisecond))
	// Nothing of the service stays on the standby: not its pools'
	// connections (which would answer read-only, or stale reads, for their
	// lifetime), and not its queue liveness, whose lock there the
	// primary's claims would not see (they would take its claims for a
	// dead owner's); the liveness is held on the primary.
	s.db.Reset() // the test's own connections through the address
	onStandby := pgtest.Conn(t, standby.URL("fulfillment"))
	onPrimary := pgtest.Conn(t, primary.URL("fulfillment"))
	var sessions, standbyLocks, primaryLocks int
	for settled := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if err := onStandby.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM pg_stat_activity WHERE datname = 'fulfillment' AND backend_type = 'client backend' AND pid <> pg_backend_pid()),
				(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory')`).Scan(&sessions, &standbyLocks); err != nil {
			t.Fatal(err)
		}
		if err := onPrimary.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").Scan(&primaryLocks); err != nil {
			t.Fatal(err)
		}
		if sessions == 0 && standbyLocks == 0 && primaryLocks > 0 {
			break
		}
		if time.Since(settled) > 10*time.Second {
			t.Fatalf("ten seconds after the address was back on the primary: the standby holds %d sessions and %d advisory locks, "+
				"the primary %d advisory locks; want none on the standby, the liveness on the primary", sessions, standbyLocks, primaryLocks)
		}
	}
	_ = onStandby.Close(ctx)
	_ = onPrimary.Close(ctx)

	// A failover: the primary dies, the address moves before the standby
	// is promoted.
	waitFor(t, "the standby replaying the payment", func() bool {
		var n int
		_ = s.db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE replay_lsn >= pg_current_wal_lsn()").Scan(&n)
		return n == 1
	})
	vip.retarget(standbyAddr)
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	vip.drop()
	onlyTheStandby("the primary dead, the standby not promoted yet", paid[1])
	promoteCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := standby.Promote(promoteCtx); err != nil {
		t.Fatal(err)
	}
	s.sendUntilAcked(t, "the standby promoted", paid[1], 10*time.Second)

	for _, p := range paid {
		s.send(t, liveEP, liveSecret, p) // a redelivery
	}
	s.db.Reset() // the test's own connections went with the primary
	s.settle(t)
	for _, o := range orders {
		if e := s.effects(t, o.GetId()); e.State != "fulfilled" || e.Licenses != 2 || e.Credits != 1 || e.Attempts != 1 || len(e.Items) != 0 {
			t.Errorf("order %s: %v; want fulfilled once (2 licenses, 1 credit, 1 attempt, no items)", o.GetMerchantOrderId(), e)
		}
	}
}

// sendUntilAcked sends p to the live endpoint, as a provider retries, until
// it is answered 200; every answer before must be 503, and the 200 must come
// within the given time of the first try. what says when, for the log.
func (s *stack) sendUntilAcked(t *testing.T, what string, p yolfi.Payload, within time.Duration) {
	t.Helper()
	from := time.Now()
	for {
		code := s.send(t, liveEP, liveSecret, p)
		if code == http.StatusOK {
			break
		}
		if code != http.StatusServiceUnavailable || time.Since(from) > within {
			t.Fatalf("%s: %v on, the webhook answered %d; want 503 until 200 within %v", what, time.Since(from), code, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s: acknowledged %v on", what, time.Since(from).Round(time.Millisecond))
}
