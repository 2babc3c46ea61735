package e2e_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// The console's sessions: an admin, a reader of every org, and an operator
// limited to org_b (whose endpoint feed_test.go names).
const (
	readerToken   = "tok-reader-0123456789abcdef"
	orgBOpsToken  = "tok-org-b-ops-0123456789abcdef"
	consoleCRM    = "crm"
	consoleDupMOI = "console-dup"
)

// withConsole adds the console's tokens, org_b's endpoint and a
// destination to the test configuration.
func withConsole(dests ...config.Destination) func(*config.Config) {
	return func(c *config.Config) {
		withDestinations(dests...)(c)
		c.Auth.Tokens = append(c.Auth.Tokens,
			config.Token{Name: "reader", Secret: readerToken, Orgs: []string{"*"},
				Scopes: []string{config.ScopeOrdersRead, config.ScopeReconciliationRead, config.ScopeOutboxRead}},
			config.Token{Name: "org-b-ops", Secret: orgBOpsToken, Orgs: []string{orgB},
				Scopes: []string{config.ScopeOrdersRead, config.ScopeReconciliationRead, config.ScopeReconciliationWrite, config.ScopeOutboxRead}},
		)
		c.Endpoints = append(c.Endpoints, config.Endpoint{ID: orgBEndpoint, Provider: "yolfi", Org: orgB, Environment: "live",
			Secrets: []config.Secret{{Value: []byte(orgBSecret)}}})
	}
}

// signIn opens the sign-in page and signs in with token.
func (b *tab) signIn(base, token string) {
	b.t.Helper()
	b.open(base+"/console/login", "#token")
	b.do("signing in", chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Submit(chromedp.CSS("#token")), chromedp.WaitVisible(chromedp.CSS("[data-testid=who]")))
}

// The console in a real browser against the real service: an admin finds
// a duplicate payment's item, reads the order's story, resolves the item,
// replays an event (no effect changes), disables and enables a destination;
// a reader cannot act; an org-limited operator never sees another org; a
// POST without the CSRF token is refused; an expired session is sent to
// sign in; and no page has a serious accessibility violation.
func TestConsoleBrowser(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	crm := startReceiver(t, true, nil)
	s := startReplicaWith(t, pgtest.DB(t), withConsole(destination(t, consoleCRM, crm, true, 5*time.Second)))
	base := s.restURL

	// A real duplicate payment: the order is paid twice, by two invoices.
	order := s.createExternalOrder(t, consoleDupMOI, consoleCRM)
	s.pay(t, consoleDupMOI)
	s.sendOK(t, event(yolfi.TypePaymentConfirmed, consoleDupMOI, "inv_second_"+consoleDupMOI))
	s.settle(t)
	waitFor(t, "delivered to crm", func() bool { return crm.TotalEffects() >= 1 })
	if e := s.effects(t, order.GetId()); e.Items["extra_payment"] != 1 || e.Licenses != 1 {
		t.Fatalf("after two payments: %s, want one license and one extra_payment item", e)
	}
	// Another org's order, paid: org_a's operators never see it, and org_b's
	// never see org_a's.
	bResp, err := s.client.CreateOrder(authed(adminToken), &fulfillmentv1.CreateOrderRequest{
		OrgId: orgB, Environment: "live", MerchantOrderId: "console-b-1",
		Lines:      []*fulfillmentv1.OrderLine{{Sku: defaultSKU, Kind: "license", Quantity: 1, UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 500}}},
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25.000000"},
	})
	if err != nil {
		t.Fatal(err)
	}
	pb := event(yolfi.TypePaymentConfirmed, "console-b-1", "inv_b_1")
	pb.OrgID = orgB
	if code := s.send(t, orgBEndpoint, orgBSecret, pb); code != http.StatusOK {
		t.Fatalf("org_b payment answered %d", code)
	}
	s.settle(t)

	credit := s.createOrder(t, "live", "console-credit") // a balance credit to acct_console-credit, unpaid

	admin := newTab(t, browser)
	admin.signIn(base, adminToken)
	if who := admin.text("[data-testid=who]"); who != "admin" {
		t.Fatalf("signed in as %q, want admin", who)
	}

	step(t, "overview shows the duplicate payment's item", func(t *testing.T) {
		admin.t = t
		admin.open(base+"/console/?refresh=off", "[data-testid=summary]")
		body := admin.text("[data-testid=summary]")
		if !strings.Contains(body, orgA) || !strings.Contains(body, "extra_payment: 1") {
			t.Fatalf("overview summary lacks org_a's extra_payment item:\n%s", body)
		}
		// The last hour's charts count what the database holds.
		for _, c := range []struct{ series, query string }{
			{"s-events", "SELECT count(*) FROM inbox_events"},
			{"s-fulfilled", "SELECT count(*) FROM order_events WHERE topic = 'order.fulfilled'"},
			{"s-delivered", "SELECT count(*) FROM outbox_attempts WHERE outcome = 'delivered'"},
		} {
			want := s.count(t, c.query)
			if got := admin.text("[data-testid=total-" + c.series + "]"); got != strconv.Itoa(want) || want == 0 {
				t.Errorf("the %s chart counts %s, the database %d", c.series, got, want)
			}
		}
		if n := admin.count("[data-testid=activity] svg.s-events rect"); n != 61 {
			t.Errorf("the events chart has %d bars, want 61 (one a minute)", n)
		}
		admin.accessible("overview")
		admin.screenshot("overview")
	})

	var itemURL string
	step(t, "find the order and read its story", func(t *testing.T) {
		admin.t = t
		admin.open(base+"/console/orders", "#q")
		admin.do("searching", chromedp.SendKeys(chromedp.CSS("#q"), consoleDupMOI), chromedp.Submit(chromedp.CSS("#q")))
		// The list before the search has the same table: wait for the
		// search's page.
		admin.waitLocation("q=" + consoleDupMOI)
		admin.do("reading the results", chromedp.WaitVisible(chromedp.CSS("[data-testid=orders]")))
		admin.accessible("orders")
		admin.click("[data-testid=orders] tbody tr a", "[data-testid=timeline]")
		if !strings.HasSuffix(admin.location(), "/console/orders/"+order.GetId()) {
			t.Fatalf("the order's page is at %s", admin.location())
		}
		why := admin.text("[data-testid=why]")
		if !strings.Contains(why, "paid 25 USDT by event evt_") || !strings.Contains(why, "extra_payment") {
			t.Errorf("why line = %q, want the payment and the open extra_payment item", why)
		}
		if n := admin.count("[data-testid=timeline] li[data-kind=event]"); n != 2 {
			t.Errorf("timeline holds %d events, want the 2 payments", n)
		}
		if n := admin.count("[data-testid=timeline] li[data-kind=grant]"); n != 1 {
			t.Errorf("timeline holds %d grants, want 1", n)
		}
		if n := admin.count("[data-testid=timeline] li[data-kind=item]"); n != 1 {
			t.Errorf("timeline holds %d items, want the extra_payment item", n)
		}
		if n := admin.count("[data-testid=timeline] li[data-kind=attempt]"); n < 1 {
			t.Errorf("timeline holds no delivery attempt to crm")
		}
		if n := admin.count("[data-testid=timeline] li[data-kind=feed]"); n != 1 {
			t.Errorf("timeline holds %d feed events, want order.fulfilled", n)
		}
		admin.accessible("order story")
		admin.screenshot("order-story")
		itemURL = bounded(admin, "reading the item link", chromedp.Evaluate[string](
			`document.querySelector("[data-testid=order-items] a").href`))

		// By the second payment's reference, and by a credited customer.
		admin.open(base+"/console/orders?q=inv_second_"+consoleDupMOI, "[data-testid=orders]")
		if by, body := admin.text("[data-testid=found-by]"), admin.text("[data-testid=orders]"); !strings.Contains(by, "payment_ref") || !strings.Contains(body, consoleDupMOI) {
			t.Errorf("search by payment ref: %q, %q", by, body)
		}
		admin.open(base+"/console/orders?q=acct_console-credit", "[data-testid=orders]")
		if by, body := admin.text("[data-testid=found-by]"), admin.text("[data-testid=orders]"); !strings.Contains(by, "customer_ref") || !strings.Contains(body, "console-credit") {
			t.Errorf("search by customer ref: %q, %q", by, body)
		}
		if credit.GetMerchantOrderId() != "console-credit" {
			t.Fatal(credit.GetMerchantOrderId())
		}
	})

	step(t, "a POST without the CSRF token is refused", func(t *testing.T) {
		admin.t = t
		admin.open(itemURL, "[data-action=resolve]")
		id := itemURL[strings.LastIndex(itemURL, "/")+1:]
		if code := admin.post("/console/reconciliation/"+id+"/resolve", map[string]string{"resolution": "no_action", "note": "forged"}); code != http.StatusForbidden {
			t.Fatalf("POST without CSRF token answered %d, want 403", code)
		}
		if code := admin.post("/console/reconciliation/"+id+"/resolve", map[string]string{"csrf": "wrong", "resolution": "no_action", "note": "forged"}); code != http.StatusForbidden {
			t.Fatalf("POST with a wrong CSRF token answered %d, want 403", code)
		}
		if n := s.count(t, "SELECT count(*) FROM reconciliation_items WHERE order_id = $1 AND state = 'open'", order.GetId()); n != 1 {
			t.Fatalf("a refused POST changed the item: %d open", n)
		}
	})

	step(t, "reader sees no action and its POSTs are refused", func(t *testing.T) {
		reader := newTab(t, browser)
		reader.signIn(base, readerToken)
		reader.open(base+"/console/orders/"+order.GetId(), "[data-testid=timeline]")
		reader.open(itemURL, "[data-testid=item-state]")
		if n := reader.count("[data-action]"); n != 0 {
			t.Errorf("the reader's item page shows %d action buttons", n)
		}
		reader.accessible("reconciliation item (reader)")
		id := itemURL[strings.LastIndex(itemURL, "/")+1:]
		if code := reader.post("/console/reconciliation/"+id+"/resolve", map[string]string{"csrf": reader.csrf(), "resolution": "no_action", "note": "reader"}); code != http.StatusForbidden {
			t.Errorf("the reader's resolve answered %d, want 403", code)
		}
		reader.open(base+"/console/outbox?destination_id="+consoleCRM, "[data-testid=messages]")
		msgURL := bounded(reader, "reading a message link", chromedp.Evaluate[string](`document.querySelector("[data-testid=messages] a").href`))
		reader.open(msgURL, "[data-testid=message-state]")
		if n := reader.count("[data-action]"); n != 0 {
			t.Errorf("the reader's message page shows %d action buttons", n)
		}
		if code := reader.post("/console/destinations/"+consoleCRM+"/disable", map[string]string{"csrf": reader.csrf(), "reason": "reader"}); code != http.StatusForbidden {
			t.Errorf("the reader's disable answered %d, want 403", code)
		}
		if n := s.count(t, "SELECT count(*) FROM reconciliation_items WHERE order_id = $1 AND state = 'open'", order.GetId()); n != 1 {
			t.Fatalf("the reader's POST changed the item: %d open", n)
		}

		step(t, "expired session is sent to sign in", func(t *testing.T) {
			reader.t = t
			if _, err := s.db.Exec(context.Background(), "UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE token_name = 'reader'"); err != nil {
				t.Fatal(err)
			}
			reader.open(base+"/console/orders", "#token")
			if loc := reader.location(); !strings.Contains(loc, "/console/login?next=") {
				t.Fatalf("an expired session landed on %s, want the sign-in page", loc)
			}
			reader.accessible("sign-in")
		})
	})

	step(t, "org-limited session never sees another org", func(t *testing.T) {
		ops := newTab(t, browser)
		ops.signIn(base, orgBOpsToken)
		ops.open(base+"/console/?refresh=off", "main h1")
		if sum := ops.body(); strings.Contains(sum, orgA) {
			t.Errorf("org_b's overview shows org_a:\n%s", sum)
		}
		ops.open(base+"/console/orders", "#q")
		if body := ops.body(); strings.Contains(body, orgA) || strings.Contains(body, consoleDupMOI) {
			t.Errorf("org_b's order list shows org_a's orders:\n%s", body)
		}
		if !strings.Contains(ops.body(), "console-b-1") {
			t.Errorf("org_b's order list lacks its own order")
		}
		ops.open(base+"/console/orders?q="+consoleDupMOI, "[data-testid=no-orders]")
		ops.open(base+"/console/orders?q="+order.GetId(), "[data-testid=no-orders]")
		ops.open(base+"/console/orders?q=inv_second_"+consoleDupMOI, "[data-testid=no-orders]")
		ops.open(base+"/console/orders?q=acct_console-credit", "[data-testid=no-orders]")
		ops.open(base+"/console/orders/"+order.GetId(), "[data-testid=error]")
		ops.open(itemURL, "[data-testid=error]")
		ops.open(base+"/console/reconciliation?state=open", "main")
		if body := ops.body(); strings.Contains(body, orgA) {
			t.Errorf("org_b's reconciliation list shows org_a:\n%s", body)
		}
		ops.open(base+"/console/outbox", "main")
		if body := ops.body(); strings.Contains(body, orgA) {
			t.Errorf("org_b's outbox shows org_a:\n%s", body)
		}
		ops.open(base+"/console/audit", "main")
		if body := ops.body(); strings.Contains(body, "admin") {
			t.Errorf("org_b's audit shows the admin's actions:\n%s", body)
		}
		ops.open(base+"/console/orders/"+bResp.GetOrder().GetId(), "[data-testid=timeline]")
	})

	step(t, "resolve the item", func(t *testing.T) {
		admin.t = t
		admin.open(itemURL, "[data-action=resolve]")
		admin.accessible("reconciliation item")
		admin.do("resolving", chromedp.SetValue(chromedp.CSS("#resolution"), "no_action"),
			chromedp.SendKeys(chromedp.CSS("#note"), "customer keeps the credit; refund sent by hand"),
			chromedp.Click(chromedp.CSS("[data-action=resolve]"), chromedp.NodeVisible),
			chromedp.WaitVisible(chromedp.CSS(".notice")))
		if st := admin.text("[data-testid=item-state]"); st != "resolved" {
			t.Fatalf("item state after resolving: %q", st)
		}
		id := itemURL[strings.LastIndex(itemURL, "/")+1:]
		got, err := s.client.GetReconciliationItem(authed(adminToken), &fulfillmentv1.GetReconciliationItemRequest{ItemId: id})
		if err != nil {
			t.Fatal(err)
		}
		if it := got.GetItem(); it.GetState() != "resolved" || it.GetResolvedBy() != "admin" || it.GetResolution() != "no_action" {
			t.Fatalf("the API says the item is %s by %q (%s)", it.GetState(), it.GetResolvedBy(), it.GetResolution())
		}
		admin.open(base+"/console/reconciliation?state=open&org_id="+orgA, "main")
		if n := admin.count("[data-item='" + id + "']"); n != 0 {
			t.Fatalf("the resolved item is still in the open list")
		}
	})

	step(t, "replay an event: effects do not change", func(t *testing.T) {
		admin.t = t
		before := s.effects(t, order.GetId())
		deliveredBefore := crm.TotalEffects()
		admin.open(base+"/console/events?order_id="+order.GetId(), "[data-testid=events]")
		admin.accessible("events")
		admin.click("[data-testid=events] tbody tr:last-child a", "[data-action=replay]")
		admin.do("replaying", chromedp.Click(chromedp.CSS("[data-action=replay]"), chromedp.NodeVisible),
			chromedp.WaitVisible(chromedp.CSS(".notice")))
		s.settle(t)
		admin.open(admin.location(), "[data-testid=replays]")
		if n := admin.text("[data-testid=replays]"); n != "1" {
			t.Errorf("replays shown: %q", n)
		}
		// What the event's processing said before the replay stays readable
		// (for a failed event, why it failed).
		if h := admin.text("[data-testid=replay-history]"); !strings.Contains(h, "confirmed payment of what the order expects") {
			t.Errorf("the replay history lacks the reason before the replay: %q", h)
		}
		admin.click("[data-action=reveal]", "[data-testid=raw-body]")
		if raw := admin.text("[data-testid=raw-body]"); !strings.Contains(raw, consoleDupMOI) {
			t.Errorf("the raw body shown lacks the order: %q", raw)
		}
		admin.accessible("event")
		after := s.effects(t, order.GetId())
		if after.String() != before.String() {
			t.Fatalf("replay changed effects: before %s, after %s", before, after)
		}
		time.Sleep(300 * time.Millisecond) // a delivery the replay queued would be sent by now
		if crm.TotalEffects() != deliveredBefore {
			t.Fatalf("replay delivered again: %d effects at crm, %d before", crm.TotalEffects(), deliveredBefore)
		}
	})

	step(t, "filter events by provider and time", func(t *testing.T) {
		admin.t = t
		admin.open(base+"/console/events?provider=yolfi&org_id="+orgA, "[data-testid=events]")
		if got, want := admin.count("[data-testid=events] tbody tr"), s.count(t, "SELECT count(*) FROM inbox_events WHERE provider = 'yolfi' AND org_id = $1", orgA); got != want || want == 0 {
			t.Errorf("org_a's yolfi events: %d rows, the database holds %d", got, want)
		}
		admin.open(base+"/console/events?provider=tbank", "main h1")
		if n := admin.count("[data-testid=events]"); n != 0 || !strings.Contains(admin.body(), "No events match") {
			t.Errorf("tbank events shown, though none was received")
		}
		admin.open(base+"/console/events?received_before=2020-01-01T00:00", "main h1")
		if n := admin.count("[data-testid=events]"); n != 0 {
			t.Errorf("events received before 2020 shown")
		}
		admin.open(base+"/console/events?received_after=yesterday", "[data-testid=error]")
		if msg := admin.text("[data-testid=error]"); !strings.Contains(msg, "received_after") {
			t.Errorf("a malformed time: %q", msg)
		}
	})

	step(t, "disable and enable a destination", func(t *testing.T) {
		admin.t = t
		admin.open(base+"/console/destinations", "[data-testid=destinations]")
		admin.do("disabling", chromedp.SendKeys(chromedp.CSS("#reason-"+consoleCRM), "crm maintenance"),
			chromedp.Click(chromedp.CSS("[data-destination="+consoleCRM+"] [data-action=disable]"), chromedp.NodeVisible),
			chromedp.WaitVisible(chromedp.CSS(".notice")))
		if st := admin.text("[data-destination=" + consoleCRM + "] [data-testid=destination-state]"); !strings.Contains(st, "disabled") || !strings.Contains(st, "crm maintenance") {
			t.Fatalf("destination state after disabling: %q", st)
		}
		ds, err := s.client.ListDestinations(authed(adminToken), &fulfillmentv1.ListDestinationsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if d := ds.GetDestinations()[0]; d.GetEnabled() || !strings.Contains(d.GetDisabledReason(), "crm maintenance") {
			t.Fatalf("the API says enabled=%v reason=%q", d.GetEnabled(), d.GetDisabledReason())
		}
		admin.accessible("destinations")
		admin.screenshot("destinations")
		admin.do("enabling", chromedp.Click(chromedp.CSS("[data-destination="+consoleCRM+"] [data-action=enable]"), chromedp.NodeVisible),
			chromedp.WaitVisible(chromedp.CSS("[data-destination="+consoleCRM+"] [data-action=disable]")))
		ds, err = s.client.ListDestinations(authed(adminToken), &fulfillmentv1.ListDestinationsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if !ds.GetDestinations()[0].GetEnabled() {
			t.Fatal("the destination is still disabled")
		}
	})

	step(t, "send a delivered message again under its key", func(t *testing.T) {
		admin.t = t
		var key string
		if err := s.db.QueryRow(context.Background(), "SELECT idempotency_key FROM outbox_messages WHERE destination_id = $1", consoleCRM).Scan(&key); err != nil {
			t.Fatal(err)
		}
		requests := crm.Requests(key)
		admin.open(base+"/console/outbox?destination_id="+consoleCRM, "[data-testid=messages]")
		admin.click("[data-testid=messages] tbody tr a", "[data-action=resend]")
		admin.accessible("outbox message")
		admin.do("resending", chromedp.Click(chromedp.CSS("[data-action=resend]"), chromedp.NodeVisible),
			chromedp.WaitVisible(chromedp.CSS(".notice")))
		waitFor(t, "delivered again", func() bool { return crm.Requests(key) == requests+1 && s.message(t, key) == "delivered" })
		if e := crm.Effects(key); e != 1 {
			t.Errorf("crm applied %s %d times, want once (it honours the key)", key, e)
		}
	})

	step(t, "every action is in the audit log", func(t *testing.T) {
		admin.t = t
		admin.open(base+"/console/audit", "[data-testid=audit]")
		for _, a := range []string{"session.sign_in", "reconciliation.resolve", "event.replay", "event.reveal_raw", "destination.disable", "destination.enable", "outbox.resend"} {
			if admin.count("[data-testid=audit] tr[data-action='"+a+"']") == 0 {
				t.Errorf("the audit log lacks %s", a)
			}
		}
		admin.accessible("audit")
		for _, p := range []string{"/console/outbox", "/console/subscriptions", "/console/access", "/console/redrive"} {
			admin.open(base+p, "main h1")
			admin.accessible(p)
		}
	})

	step(t, "sign out ends the session", func(t *testing.T) {
		admin.t = t
		admin.open(base+"/console/", "[data-testid=who]")
		admin.click("header form button", "#token")
		if n := s.count(t, "SELECT count(*) FROM console_sessions WHERE token_name = 'admin'"); n != 0 {
			t.Fatalf("%d admin sessions left after signing out", n)
		}
		admin.open(base+"/console/orders", "#token")
		if loc := admin.location(); !strings.Contains(loc, "/console/login") {
			t.Fatalf("after signing out, /console/orders landed on %s", loc)
		}
	})
}

// step runs one step of a scenario as a subtest. The steps of a scenario
// run in order, on the state the earlier ones left, so none is parallel.
func step(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	t.Run(name, fn)
}
