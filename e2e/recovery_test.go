package e2e_test

// Crash recovery in seconds, not a lease (issue 8, item 6): the events a
// killed fulfillmentd had claimed are processed within 5 s by the restarted
// process, or by a live replica without any restart — with a 60 s lease, so
// that the lease cannot be what frees them. And a live worker keeps its
// claim past its lease, however long it holds it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// recoveryBound is how soon after a worker's death (or its process's
// restart) the events it claimed must be processed.
const recoveryBound = 5 * time.Second

// SIGKILLed right after it claimed an event, fulfillmentd is restarted: the
// event is fulfilled exactly once within 5 s of the restart.
func TestRecoveryAfterRestart(t *testing.T) {
	t.Parallel()
	ps := newProcService(t, procFailpointBuild.binary(t))
	ps.queueOnly = true // (claims to kill or hold)
	p := ps.start(t, "after-claim")
	order := p.createOrder(t, "live", "restart-1")
	ev := event(yolfi.TypePaymentConfirmed, "restart-1", "inv_restart-1")
	if code, err := p.deliver(ev); err == nil && code != http.StatusOK {
		t.Fatalf("delivering: status %d, want 200", code) // (an error: it died while answering)
	}
	if st := p.waitExit(t, 20*time.Second); !daemon.Killed(st) || !strings.Contains(p.output.String(), "killing the process at after-claim") {
		t.Fatalf("fulfillmentd exited with %v, want killed at after-claim", st)
	}
	killed := time.Now()
	if row := inboxEvent(t, p.stack, ev.ID); !row.claimKilled() {
		t.Fatalf("killed event: %v; want pending, undecided, attempt 1, its claim the dead worker's or freed", row)
	}

	restarted := time.Now()
	p2 := ps.start(t, "")
	ready := time.Since(restarted)
	processed := waitProcessed(t, p2.stack, ev.ID)
	took := processed.Sub(restarted)
	t.Logf("recovery: processed %v after the restart (the new process served after %v; %v after the kill)",
		took.Round(time.Millisecond), ready.Round(time.Millisecond), processed.Sub(killed).Round(time.Millisecond))
	if took > recoveryBound {
		t.Errorf("processed %v after the restart, want within %v (lease: %v)", took, recoveryBound, ps.lease)
	}
	assertFulfilledOnce(t, p2.stack, order.GetId(), []yolfi.Payload{ev})
	if row := inboxEvent(t, p2.stack, ev.ID); row.Attempts != 2 {
		t.Errorf("attempts = %d, want 2 (the dead worker's claim and the new one)", row.Attempts)
	}
}

// Two live replicas on one database: the one that claimed an event is
// SIGKILLed while it holds it, and the other fulfils the event within 5 s,
// without any restart. While both live, the other leaves the claim alone.
func TestRecoveryByLiveReplica(t *testing.T) {
	t.Parallel()
	ps := newProcService(t, procFailpointBuild.binary(t))
	ps.queueOnly = true // (claims to kill or hold)
	b, ev, took := killClaimHolder(t, ps, "replica-1")
	t.Logf("recovery: processed by the live replica %v after the kill", took.Round(time.Millisecond))
	if took > recoveryBound {
		t.Errorf("processed %v after the kill, want within %v (lease: %v)", took, recoveryBound, ps.lease)
	}
	if !b.running() {
		t.Fatal("the live replica is not running")
	}
	if row := inboxEvent(t, b.stack, ev.ID); row.Attempts != 2 {
		t.Errorf("attempts = %d, want 2 (a's claim and b's)", row.Attempts)
	}
}

// killClaimHolder runs two replicas of ps: a claims the confirmation of a
// new order merchantOrderID and holds it (a failpoint sleeps, the process
// lives on); b, started after, leaves it alone while a lives; a is then
// SIGKILLed. It returns b, the event, and how long after the kill b had
// processed it — the order checked fulfilled once.
func killClaimHolder(t *testing.T, ps *procService, merchantOrderID string) (b *proc, ev yolfi.Payload, took time.Duration) {
	t.Helper()
	a := ps.start(t, "after-claim,sleep=10m")
	order := a.createOrder(t, "live", merchantOrderID)
	ev = event(yolfi.TypePaymentConfirmed, merchantOrderID, "inv_"+merchantOrderID)
	a.sendOK(t, ev)
	owner := waitLeased(t, a.stack, ev.ID)
	if !strings.Contains(owner, fmt.Sprintf("/%d/", a.child.Pid())) {
		t.Fatalf("event leased to %q, not to a (pid %d)", owner, a.child.Pid())
	}
	b = ps.start(t, "")

	// b claims every 50ms and reclaims every second; the kill falls at a
	// random moment of b's reclaim period, so that the times measured
	// cover all of it.
	time.Sleep(2*time.Second + rand.N(time.Second))
	if row := inboxEvent(t, b.stack, ev.ID); row.State != "pending" || row.Attempts != 1 || leaseOwner(t, b.stack, ev.ID) != owner {
		t.Fatalf("with both replicas live: %v; want still claimed by a, attempt 1", row)
	}

	killed := time.Now()
	if st := a.kill(t); !daemon.Killed(st) {
		t.Fatalf("a exited with %v, want killed", st)
	}
	took = waitProcessed(t, b.stack, ev.ID).Sub(killed)
	assertFulfilledOnce(t, b.stack, order.GetId(), []yolfi.Payload{ev})
	return b, ev, took
}

// A live worker that holds its claim longer than its lease keeps it: the
// other replica, claiming all along, never takes it, and the worker
// completes it at its first attempt.
func TestLiveWorkerKeepsClaimPastLease(t *testing.T) {
	t.Parallel()
	ps := newProcService(t, procFailpointBuild.binary(t))
	ps.queueOnly = true // (claims to kill or hold)
	ps.lease = time.Second
	a := ps.start(t, "after-claim,sleep=4s")
	order := a.createOrder(t, "live", "slow-1")
	ev := event(yolfi.TypePaymentConfirmed, "slow-1", "inv_slow-1")
	a.sendOK(t, ev)
	claimed := time.Now()
	waitLeased(t, a.stack, ev.ID)
	b := ps.start(t, "")

	processed := waitProcessed(t, b.stack, ev.ID)
	if held := processed.Sub(claimed); held < 3*time.Second {
		t.Errorf("processed %v after the claim; a holds it 4s: someone else processed it", held)
	}
	if !strings.Contains(a.output.String(), "failpoint: sleeping 4s at after-claim") {
		t.Errorf("a did not hold the claim at the failpoint")
	}
	assertFulfilledOnce(t, b.stack, order.GetId(), []yolfi.Payload{ev})
	if row := inboxEvent(t, b.stack, ev.ID); row.Attempts != 1 {
		t.Errorf("attempts = %d, want 1: the live worker's claim was taken past its 1s lease", row.Attempts)
	}
	if !a.running() || !b.running() {
		t.Error("a replica stopped")
	}
}

// The former name of the inbox's section still works, with one warning at
// start.
func TestWarnsAboutWorkerKey(t *testing.T) {
	t.Parallel()
	cfg := testConfig(pgtest.DB(t))
	q := cfg.Inbox
	cfg.Worker = &q // as config.Load leaves a file's worker section
	var logs bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), config.DeprecatedWorker); n != 1 {
		t.Errorf("start-up log holds the deprecation warning %d times, want once:\n%s", n, logs.String())
	}
}

// waitProcessed waits until the event is processed and returns when it was,
// by the database's clock (the same host's clock as the test's).
func waitProcessed(t *testing.T, s *stack, eventID string) time.Time {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var at time.Time
		err := s.db.QueryRow(context.Background(),
			"SELECT processed_at FROM inbox_events WHERE event_id = $1 AND state = 'processed'", eventID).Scan(&at)
		if err == nil {
			return at
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("reading event %s: %v", eventID, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("event %s not processed after 30s: %v; inbox: %s", eventID, inboxEvent(t, s, eventID), inboxSummary(t, s))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitLeased waits until the event is claimed and returns its owner.
func waitLeased(t *testing.T, s *stack, eventID string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if owner := leaseOwner(t, s, eventID); owner != "" {
			return owner
		}
		if time.Now().After(deadline) {
			t.Fatalf("event %s not claimed after 20s: %v", eventID, inboxEvent(t, s, eventID))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leaseOwner is the owner of the event's claim, "" when unclaimed.
func leaseOwner(t *testing.T, s *stack, eventID string) string {
	t.Helper()
	var owner string
	err := s.db.QueryRow(context.Background(),
		"SELECT coalesce(w.lease_owner, '') FROM inbox_events e JOIN inbox_work w USING (id) WHERE e.event_id = $1", eventID).Scan(&owner)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("reading event %s: %v", eventID, err)
	}
	return owner
}
