package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// A bulk retry in the console: the operator filters the failed messages,
// asks for a plan (nothing changes), confirms, and watches the run to its
// end; the receiver gets each message once.
func TestConsoleBulkRetry(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	erp := startReceiver(t, false, receiver.Always(receiver.Action{Status: 503})) // every request that succeeds is an effect: a second delivery would show
	d := destination(t, "erp", erp, true, 5*time.Second)
	d.MaxAttempts = 2
	s := startReplicaWith(t, pgtest.DB(t), withConsole(d))
	const orders = 3
	for i := range orders {
		moi := "bulk-" + string(rune('a'+i))
		s.createExternalOrder(t, moi, "erp")
		s.pay(t, moi)
	}
	s.settle(t)
	waitFor(t, "every message failed", func() bool {
		return s.count(t, "SELECT count(*) FROM outbox_messages WHERE destination_id = 'erp' AND state = 'failed'") == orders
	})
	failedRequests := erp.TotalEffects()

	admin := newTab(t, browser)
	admin.signIn(s.restURL, adminToken)
	admin.open(s.restURL+"/console/outbox?org_id="+orgA+"&state=failed&destination_id=erp", "[data-action=plan-retry]")
	admin.click("[data-action=plan-retry]", "[data-testid=plan]")
	if n := admin.text("[data-testid=plan-matched]"); n != "3" {
		t.Fatalf("the plan matches %q items, want 3", n)
	}
	if n := admin.count("[data-testid=plan-sample] tbody tr"); n != orders {
		t.Errorf("the plan samples %d items, want %d", n, orders)
	}
	if n := s.count(t, "SELECT count(*) FROM outbox_messages WHERE state = 'failed'"); n != orders {
		t.Fatalf("planning changed messages: %d failed", n)
	}
	admin.accessible("bulk plan")
	admin.screenshot("bulk-plan")

	erp.SetPlan(nil) // the receiver is back
	admin.click("[data-action=confirm]", "[data-testid=run-state]")
	if !strings.Contains(admin.location(), "/console/redrive/") {
		t.Fatalf("confirming landed on %s", admin.location())
	}
	admin.waitText("[data-testid=run-state]", "done") // the page refreshes itself (htmx)
	admin.accessible("bulk run")
	admin.screenshot("bulk-run")
	waitFor(t, "every message delivered", func() bool {
		return s.count(t, "SELECT count(*) FROM outbox_messages WHERE destination_id = 'erp' AND state = 'delivered'") == orders
	})
	if n := erp.TotalEffects() - failedRequests; n != orders {
		t.Errorf("the receiver applied %d effects after the retry, want %d (each message once)", n, orders)
	}
	if dd := erp.Doubled(); len(dd) > 0 {
		t.Errorf("keys applied twice: %v", dd)
	}
	admin.open(s.restURL+"/console/audit?action=redrive.start", "[data-testid=audit]")
	if n := admin.count("[data-testid=audit] tr[data-action='redrive.start']"); n != 1 {
		t.Errorf("the audit log holds %d re-drive starts, want 1", n)
	}
}

// Cancelling a run in the console: the batch being applied completes, the
// rest is left as it was, and the receiver gets each applied message once.
// The test holds a lock on the oldest message so that the first batch
// waits, and lets it go once the cancel waits behind that batch: the run is
// cancelled after exactly one batch, whatever the machine's speed.
func TestConsoleBulkRetryCancel(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	erp := startReceiver(t, false, nil)
	s := startReplicaWith(t, pgtest.DB(t), withConsole(destination(t, "erp", erp, true, 5*time.Second)))
	ctx := context.Background()
	const messages = 250 // a batch is 200
	if _, err := s.db.Exec(ctx, `INSERT INTO outbox_messages
		(destination_id, topic, idempotency_key, org_id, environment, required, payload, state, attempts, last_error)
		SELECT 'erp', 'order.fulfilled', 'cancel-' || g, $1, 'live', false, '{}', 'failed', 2, 'HTTP 503'
		FROM generate_series(1, $2::int) AS g`, orgA, messages); err != nil {
		t.Fatal(err)
	}

	admin := newTab(t, browser)
	admin.signIn(s.restURL, adminToken)
	admin.open(s.restURL+"/console/redrive?target=outbox&org_id="+orgA+"&state=failed&destination_id=erp", "[data-testid=plan]")
	if n := admin.text("[data-testid=plan-matched]"); n != "250" {
		t.Fatalf("the plan matches %q items, want 250", n)
	}

	hold, err := s.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(ctx) }()
	if _, err := hold.Exec(ctx, `SELECT id FROM outbox_messages WHERE destination_id = 'erp' ORDER BY id LIMIT 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	admin.click("[data-action=confirm]", "[data-action=cancel]")
	waitFor(t, "the first batch waiting for the held message", func() bool {
		return s.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE '%redrive_items%'`) == 1
	})
	if st := admin.text("[data-testid=run-state]"); st != "running" {
		t.Fatalf("the run page says %q, want running", st)
	}
	// The run page refreshes itself (htmx) and may swap the button between
	// a query for its node and a click on it; a click in the page itself
	// finds the button of the moment.
	bounded(admin, "cancelling", chromedp.Evaluate[bool](`(() => { document.querySelector("[data-action=cancel]").click(); return true })()`))
	waitFor(t, "the cancel waiting behind the batch", func() bool {
		return s.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE '%cancelled_by%'`) == 1
	})
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The cancel was a plain form's submission: its answer replaces the page.
	admin.waitText("[data-testid=run-state]", "cancelled")
	if !strings.Contains(admin.text(".notice"), "cancelled") {
		t.Errorf("the notice says %q, want that the run is cancelled", admin.text(".notice"))
	}
	admin.accessible("cancelled run")

	var state, cancelledBy string
	var applied, skipped int
	if err := s.db.QueryRow(ctx, `SELECT state, applied, skipped, coalesce(cancelled_by, '') FROM redrive_runs`).Scan(&state, &applied, &skipped, &cancelledBy); err != nil {
		t.Fatal(err)
	}
	if state != "cancelled" || applied != 200 || skipped != 0 || cancelledBy != "admin" {
		t.Fatalf("the run: %s, %d applied, %d skipped, cancelled by %q; want cancelled after one batch of 200 by admin", state, applied, skipped, cancelledBy)
	}
	waitFor(t, "the applied batch delivered", func() bool {
		return s.count(t, "SELECT count(*) FROM outbox_messages WHERE destination_id = 'erp' AND state = 'delivered'") == applied
	})
	time.Sleep(300 * time.Millisecond) // several claim polls: a message the cancel left would be sent by now
	if n := s.count(t, "SELECT count(*) FROM outbox_messages WHERE destination_id = 'erp' AND state = 'failed'"); n != messages-applied {
		t.Errorf("%d messages left failed, want %d", n, messages-applied)
	}
	if n := erp.TotalEffects(); n != applied {
		t.Errorf("the receiver applied %d effects, want %d (each applied message once)", n, applied)
	}
	if dd := erp.Doubled(); len(dd) > 0 {
		t.Errorf("keys applied twice: %v", dd)
	}
	admin.open(s.restURL+"/console/audit?action=redrive.cancel", "[data-testid=audit]")
	if n := admin.count("[data-testid=audit] tr[data-action='redrive.cancel']"); n != 1 {
		t.Errorf("the audit log holds %d re-drive cancels, want 1", n)
	}
}
