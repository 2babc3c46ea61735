package e2e_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// The raw body's reveal is swapped in place (htmx): when it is refused —
// here the session ended while the event's page was open — the operator
// reads why where the button was. The refusal's page had no #raw, so the
// button vanished and nothing was said.
func TestConsoleRevealRefusedSaysWhy(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	s := startReplicaWith(t, pgtest.DB(t), withConsole())
	s.createOrder(t, "live", "reveal-1")
	s.pay(t, "reveal-1")
	s.settle(t)

	admin := newTab(t, browser)
	admin.signIn(s.restURL, adminToken)
	admin.open(s.restURL+"/console/events", "[data-testid=events]")
	admin.click("[data-testid=events] tbody tr a", "[data-action=reveal]")
	if _, err := s.db.Exec(context.Background(), "UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE token_name = 'admin'"); err != nil {
		t.Fatal(err)
	}
	admin.do("revealing after the session ended", chromedp.Click(chromedp.CSS("[data-action=reveal]"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS("[data-testid=error]")))
	if msg := admin.text("[data-testid=error]"); !strings.Contains(msg, "sign in again") {
		t.Errorf("the refused reveal says %q, want that the session ended", msg)
	}
}
