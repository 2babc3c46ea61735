package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/internal/pgtest"
	"github.com/fulfillplatform/fulfillment/internal/receiver"
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
	deadline := time.Now().Add(20 * time.Second)
	for admin.text("[data-testid=run-state]") != "done" {
		if time.Now().After(deadline) {
			t.Fatalf("the run page still says %q after 20s", admin.text("[data-testid=run-state]"))
		}
		time.Sleep(200 * time.Millisecond) // the page refreshes itself (htmx)
	}
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
