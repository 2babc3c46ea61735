package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// Scenario 1: the same signed event twice, also concurrently → one stored
// event, one business effect.
func TestScenario1DuplicateEvent(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	order := s.createOrder(t, "live", "s1")
	ev := event(yolfi.TypePaymentConfirmed, "s1", "inv_s1")

	s.sendOK(t, ev)
	s.sendOK(t, ev)
	s.settle(t)
	s.sendOK(t, ev) // after processing, too

	answers := make([]int, 10)
	race(10, func(i int) { answers[i] = s.send(t, liveEP, liveSecret, ev) })
	for i, c := range answers {
		if c != http.StatusOK {
			t.Errorf("concurrent redelivery %d answered %d, want 200", i, c)
		}
	}
	s.settle(t)

	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = $1", ev.ID); n != 1 {
		t.Errorf("stored the event %d times, want 1", n)
	}
	got := s.effects(t, order.GetId())
	if got.State != "fulfilled" || got.Licenses != 2 || got.Credits != 1 || len(got.Items) != 0 {
		t.Errorf("effects: %v; want fulfilled, 2 licenses, 1 credit, no items", got)
	}
}

// The same event sent 50 times concurrently: one inbox row, one entitlement
// per unit, one ledger credit.
func TestFiftyConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	order := s.createOrder(t, "live", "c50")
	ev := event(yolfi.TypePaymentConfirmed, "c50", "inv_c50")
	answers := make([]int, 50)
	race(50, func(i int) { answers[i] = s.send(t, liveEP, liveSecret, ev) })
	for i, c := range answers {
		if c != http.StatusOK {
			t.Fatalf("delivery %d answered %d, want 200", i, c)
		}
	}
	s.settle(t)
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = $1", ev.ID); n != 1 {
		t.Errorf("inbox rows = %d, want 1", n)
	}
	got := s.effects(t, order.GetId())
	if got.Licenses != 2 || got.Credits != 1 || got.State != "fulfilled" {
		t.Errorf("effects: %v; want 2 licenses, 1 credit, fulfilled", got)
	}
	if n := s.count(t, "SELECT count(DISTINCT value) FROM entitlements WHERE order_id = $1", order.GetId()); n != 2 {
		t.Errorf("distinct license keys = %d, want 2", n)
	}
}

// Scenario 3: two confirmed payment attempts for one order → fulfilled once,
// the extra payment flagged (once, however often it is redelivered).
func TestScenario3TwoConfirmedAttempts(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	order := s.createOrder(t, "live", "s3")
	first := event(yolfi.TypePaymentConfirmed, "s3", "inv_s3a")
	second := event(yolfi.TypePaymentConfirmed, "s3", "inv_s3b")
	s.sendOK(t, first)
	s.settle(t)
	s.sendOK(t, second)
	s.sendOK(t, second)
	s.settle(t)
	// The same second payment under a new event id (a provider resend).
	again := second
	again.ID = yolfi.NewID("evt_")
	s.sendOK(t, again)
	s.settle(t)

	got := s.effects(t, order.GetId())
	if got.State != "fulfilled" || got.Licenses != 2 || got.Credits != 1 {
		t.Errorf("effects: %v; want fulfilled once", got)
	}
	if got.Items["extra_payment"] != 1 || len(got.Items) != 1 {
		t.Errorf("items = %v, want exactly one extra_payment", got.Items)
	}
	if got.Attempts != 2 {
		t.Errorf("attempts = %d, want 2", got.Attempts)
	}

	// Visible through the API with the filter of the issue.
	resp, err := s.client.ListReconciliationItems(authed(orgAToken), &fulfillmentv1.ListReconciliationItemsRequest{Kind: "extra_payment"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetItems()) != 1 || resp.GetItems()[0].GetOrderId() != order.GetId() || resp.GetItems()[0].GetAttemptRef() != "inv_s3b" {
		t.Errorf("ListReconciliationItems = %v", resp.GetItems())
	}
}

// Two different confirmed payments for one order arriving together: the
// order row lock serializes them, so exactly one pays and one is flagged.
func TestConcurrentConfirmations(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	for round := range 5 {
		id := "cc-" + string(rune('a'+round))
		order := s.createOrder(t, "live", id)
		evs := []yolfi.Payload{
			event(yolfi.TypePaymentConfirmed, id, "inv_"+id+"_1"),
			event(yolfi.TypePaymentConfirmed, id, "inv_"+id+"_2"),
			event(yolfi.TypePaymentConfirmed, id, "inv_"+id+"_3"),
		}
		race(len(evs)*3, func(i int) { s.send(t, liveEP, liveSecret, evs[i%len(evs)]) })
		s.settle(t)
		got := s.effects(t, order.GetId())
		if got.State != "fulfilled" || got.Licenses != 2 || got.Credits != 1 || got.Items["extra_payment"] != 2 || len(got.Items) != 1 {
			t.Errorf("round %d: %v; want fulfilled once and two extra_payment items", round, got)
		}
	}
}

// Scenario 4: bad signature, org mismatch, unknown order → nothing granted.
func TestScenario4Rejections(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	order := s.createOrder(t, "live", "s4")
	good := event(yolfi.TypePaymentConfirmed, "s4", "inv_s4")

	// Bad signature: signed with another secret, or not signed at all.
	if code := s.send(t, liveEP, "ywhsec_wrong_0123456789abcdef", good); code != http.StatusUnauthorized {
		t.Errorf("wrong secret: %d, want 401", code)
	}
	body, _ := json.Marshal(good)
	req, _ := http.NewRequest("POST", s.ingestURL+"/webhooks/"+liveEP, strings.NewReader(string(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unsigned: %d, want 401", resp.StatusCode)
	}
	// A valid signature over tampered bytes.
	tampered := strings.Replace(string(body), "25.000000", "99.000000", 1)
	req, _ = yolfi.NewRequest(t.Context(), s.ingestURL+"/webhooks/"+liveEP, []byte(liveSecret), body, good.ID)
	req.Body = http.NoBody
	req2, _ := http.NewRequest("POST", s.ingestURL+"/webhooks/"+liveEP, strings.NewReader(tampered))
	req2.Header = req.Header
	resp, err = http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("tampered body: %d, want 401", resp.StatusCode)
	}

	// Org mismatch, correctly signed.
	other := good
	other.ID = yolfi.NewID("evt_")
	other.OrgID = "org_b"
	if code := s.send(t, liveEP, liveSecret, other); code != http.StatusBadRequest {
		t.Errorf("org mismatch: %d, want 400", code)
	}
	// Event id header differs from the body id.
	if code := s.sendRaw(t, liveEP, liveSecret, body, "evt_other"); code != http.StatusBadRequest {
		t.Errorf("event id mismatch: %d, want 400", code)
	}
	// Unknown endpoint.
	if code := s.send(t, "nope", liveSecret, good); code != http.StatusNotFound {
		t.Errorf("unknown endpoint: %d, want 404", code)
	}
	// Not JSON, validly signed.
	if code := s.sendRaw(t, liveEP, liveSecret, []byte("not json"), ""); code != http.StatusBadRequest {
		t.Errorf("non-JSON body: %d, want 400", code)
	}
	// Too large.
	huge := make([]byte, 300<<10)
	if code := s.sendRaw(t, liveEP, liveSecret, huge, ""); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d, want 413", code)
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events"); n != 0 {
		t.Errorf("rejected requests stored %d events", n)
	}

	// Unknown order: stored and acknowledged, nothing granted, an
	// unmatched_payment item opened.
	unknown := event(yolfi.TypePaymentConfirmed, "no-such-order", "inv_unknown")
	s.sendOK(t, unknown)
	s.settle(t)
	if n := s.count(t, "SELECT count(*) FROM entitlements") + s.count(t, "SELECT count(*) FROM ledger_entries"); n != 0 {
		t.Errorf("%d grants after rejected and unmatched events, want 0", n)
	}
	if n := s.count(t, "SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment'"); n != 1 {
		t.Errorf("unmatched_payment items = %d, want 1", n)
	}
	if got := s.effects(t, order.GetId()); got.State != "pending_payment" || got.Licenses != 0 {
		t.Errorf("order touched by rejected events: %v", got)
	}
	// A paylink alone never identifies an order.
	byLink := event(yolfi.TypePaymentConfirmed, "", "inv_link")
	byLink.Data.PaylinkID = "pl_s4"
	s.sendOK(t, byLink)
	s.settle(t)
	if got := s.effects(t, order.GetId()); got.Licenses != 0 {
		t.Errorf("a paylink-only payment was matched: %v", got)
	}
}

// Scenario 5: an old invoice event after confirmation → the fulfilled order
// does not regress.
func TestScenario5StaleInvoiceEvents(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	order := s.createOrder(t, "live", "s5")
	// Settled one by one: events of one order sent back to back may be
	// claimed by different workers and applied in either order.
	s.sendOK(t, event(yolfi.TypeInvoiceCreated, "s5", "inv_s5"))
	s.settle(t)
	s.sendOK(t, event(yolfi.TypePaymentConfirmed, "s5", "inv_s5"))
	s.settle(t)
	for _, typ := range []string{yolfi.TypeInvoiceOverdue, yolfi.TypeInvoiceCancelled, yolfi.TypeInvoiceCreated} {
		s.sendOK(t, event(typ, "s5", "inv_s5"))
	}
	s.settle(t)

	got := s.effects(t, order.GetId())
	if got.State != "fulfilled" || got.Licenses != 2 || got.Credits != 1 {
		t.Errorf("effects: %v; want still fulfilled", got)
	}
	if d := s.decisions(t, order.GetId()); d != "attempt_recorded,fulfilled,stale_ignored,stale_ignored,stale_ignored" {
		t.Errorf("decisions = %s", d)
	}
	var attemptState string
	_ = s.db.QueryRow(t.Context(), "SELECT state FROM payment_attempts WHERE order_id = $1", order.GetId()).Scan(&attemptState)
	if attemptState != "confirmed" {
		t.Errorf("attempt state = %s, want confirmed", attemptState)
	}

	// The order view shows the history.
	resp, err := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: order.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	o := resp.GetOrder()
	if len(o.GetHistory().GetEvents()) != 5 || len(o.GetHistory().GetEntitlements()) != 2 || len(o.GetHistory().GetLedgerEntries()) != 1 || len(o.GetHistory().GetPaymentAttempts()) != 1 {
		t.Errorf("order view: %d events, %d entitlements, %d ledger, %d attempts",
			len(o.GetHistory().GetEvents()), len(o.GetHistory().GetEntitlements()), len(o.GetHistory().GetLedgerEntries()), len(o.GetHistory().GetPaymentAttempts()))
	}
	for _, e := range o.GetHistory().GetEntitlements() {
		if !strings.HasPrefix(e.GetValue(), "LIC-") {
			t.Errorf("owning org sees license value %q", e.GetValue())
		}
	}
	if o.GetHistory().GetLedgerEntries()[0].GetAmount().GetMinorUnits() != creditMinor {
		t.Errorf("credit = %v", o.GetHistory().GetLedgerEntries()[0].GetAmount())
	}
	// An all-orgs admin token sees the order but not the license keys.
	resp, err = s.client.GetOrder(authed(adminToken), &fulfillmentv1.GetOrderRequest{OrderId: order.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range resp.GetOrder().GetHistory().GetEntitlements() {
		if e.GetValue() != "" {
			t.Errorf("admin token sees license value %q", e.GetValue())
		}
	}
}

// Scenario 6: a test-mode event sent to the live endpoint → no real license,
// shipment or credit; the same event on the test endpoint fulfills a test
// order.
func TestScenario6TestModeOnLive(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	live := s.createOrder(t, "live", "s6")
	testOrder := s.createOrder(t, "test", "s6")

	off := false
	ev := event(yolfi.TypePaymentConfirmed, "s6", "inv_s6")
	ev.Livemode = &off
	s.sendOK(t, ev)
	prefixed := event(yolfi.TypePaymentConfirmed, "s6", "inv_s6b")
	prefixed.ID = yolfi.NewID("evt_test_")
	s.sendOK(t, prefixed)
	s.settle(t)

	if got := s.effects(t, live.GetId()); got.Licenses != 0 || got.Credits != 0 || got.State != "pending_payment" {
		t.Errorf("live order after test events: %v", got)
	}
	var ignored int
	_ = s.db.QueryRow(t.Context(), "SELECT count(*) FROM inbox_events WHERE state = 'ignored' AND decision = 'test_mode_ignored'").Scan(&ignored)
	if ignored != 2 {
		t.Errorf("test-mode events recorded as ignored: %d, want 2", ignored)
	}

	// On the test endpoint the same kind of event fulfills the test order.
	if code := s.send(t, testEP, testSecret, ev); code != http.StatusOK {
		t.Fatalf("test endpoint: %d", code)
	}
	s.settle(t)
	if got := s.effects(t, testOrder.GetId()); got.State != "fulfilled" || got.Licenses != 2 {
		t.Errorf("test order: %v; want fulfilled", got)
	}
	if got := s.effects(t, live.GetId()); got.Licenses != 0 {
		t.Errorf("live order granted by a test event: %v", got)
	}
}

// Amount rules: under tolerance → on hold + amount_mismatch; within the
// tolerance → fulfilled; over → fulfilled + overpayment; other token → hold.
func TestAmountRules(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	cases := []struct {
		name, amount, token string
		state               string
		licenses            int
		item                string
	}{
		{"under tolerance", "24.000000", "USDT", "on_hold", 0, "amount_mismatch"},
		{"within tolerance", "24.600000", "USDT", "fulfilled", 2, ""},
		{"exact", "25", "USDT", "fulfilled", 2, ""},
		{"over", "30.000000", "USDT", "fulfilled", 2, "overpayment"},
		{"other token", "25.000000", "USDC", "on_hold", 0, "amount_mismatch"},
	}
	for i, tc := range cases {
		id := "amt-" + string(rune('a'+i))
		order := s.createOrder(t, "live", id)
		ev := event(yolfi.TypePaymentConfirmed, id, "inv_"+id)
		ev.Data.Amount, ev.Data.Token = tc.amount, tc.token
		s.sendOK(t, ev)
		s.settle(t)
		got := s.effects(t, order.GetId())
		wantItems := 0
		if tc.item != "" {
			wantItems = 1
		}
		if got.State != tc.state || got.Licenses != tc.licenses || got.Items[tc.item] != wantItems || len(got.Items) != wantItems {
			t.Errorf("%s: %v; want state %s, %d licenses, item %q", tc.name, got, tc.state, tc.licenses, tc.item)
		}
	}
}

// Unknown order over gRPC: RecordEvent needs the ingest scope.
func TestRecordEventNeedsIngestScope(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, err := s.client.RecordEvent(authed(orgAToken), &fulfillmentv1.RecordEventRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("RecordEvent with an orders token: %v, want PermissionDenied", err)
	}
}

// Reconciliation items page newest first, filter by kind, and refuse bad
// filters and foreign page tokens.
func TestReconciliationListing(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	for i := range 5 {
		s.sendOK(t, event(yolfi.TypePaymentConfirmed, "nobody-"+string(rune('a'+i)), "inv_nobody_"+string(rune('a'+i))))
	}
	s.settle(t)
	ctx := authed(orgAToken)
	seen := map[string]bool{}
	token := ""
	for pages := 0; ; pages++ {
		resp, err := s.client.ListReconciliationItems(ctx, &fulfillmentv1.ListReconciliationItemsRequest{
			Kind: "unmatched_payment", State: "open", PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for i, it := range resp.GetItems() {
			if seen[it.GetId()] || it.GetKind() != "unmatched_payment" || it.GetOrgId() != orgA {
				t.Errorf("page %d: unexpected item %v", pages, it)
			}
			if i > 0 && it.GetId() >= resp.GetItems()[i-1].GetId() {
				t.Errorf("page %d is not newest first", pages)
			}
			seen[it.GetId()] = true
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		_, err = s.client.ListReconciliationItems(ctx, &fulfillmentv1.ListReconciliationItemsRequest{Kind: "extra_payment", PageToken: token})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("a token reused with another kind: %v, want InvalidArgument", err)
		}
	}
	if len(seen) != 5 {
		t.Errorf("listed %d unmatched_payment items, want 5", len(seen))
	}
	for _, bad := range []*fulfillmentv1.ListReconciliationItemsRequest{{Kind: "refund"}, {State: "closed"}, {OrderId: "x"}} {
		if _, err := s.client.ListReconciliationItems(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("filter %v: %v, want InvalidArgument", bad, err)
		}
	}
}

// Two replicas on one database, each receiving every delivery of the same
// events at the same time (a provider retrying against a load balancer):
// each order is still fulfilled once, with one item per extra payment.
func TestTwoReplicas(t *testing.T) {
	t.Parallel()
	a := startStack(t)
	b := startReplica(t, a.dbURL)
	const orders = 10
	var evs []yolfi.Payload
	ids := make([]string, orders)
	for i := range orders {
		mid := fmt.Sprintf("rep-%d", i)
		ids[i] = a.createOrder(t, "live", mid).GetId()
		evs = append(evs,
			event(yolfi.TypePaymentConfirmed, mid, "inv_"+mid+"_1"),
			event(yolfi.TypePaymentConfirmed, mid, "inv_"+mid+"_2"))
	}
	replicas := []*stack{a, b}
	race(len(evs)*4, func(i int) {
		s := replicas[i%2]
		if code := s.send(t, liveEP, liveSecret, evs[(i/2)%len(evs)]); code != http.StatusOK {
			t.Errorf("delivery %d answered %d", i, code)
		}
	})
	a.settle(t)
	for i, id := range ids {
		got := a.effects(t, id)
		if got.State != "fulfilled" || got.Licenses != 2 || got.Credits != 1 || got.Items["extra_payment"] != 1 || len(got.Items) != 1 {
			t.Errorf("order %d: %v; want fulfilled once and one extra_payment item", i, got)
		}
	}
	if n := a.count(t, "SELECT count(*) FROM inbox_events"); n != len(evs) {
		t.Errorf("inbox rows = %d, want %d", n, len(evs))
	}
}
