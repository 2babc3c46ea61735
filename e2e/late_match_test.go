package e2e_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

// lateMatchWithin is how soon after CreateOrder a payment that came first
// must be applied.
const lateMatchWithin = 5 * time.Second

// waitLicenses waits, up to lateMatchWithin after since, until the order
// has want licenses, and returns how long after since that was.
func (s *stack) waitLicenses(t *testing.T, orderID string, want int, since time.Time) time.Duration {
	t.Helper()
	for {
		if s.count(t, "SELECT count(*) FROM entitlements WHERE order_id = $1", orderID) == want {
			return time.Since(since)
		}
		if time.Since(since) > lateMatchWithin {
			t.Fatalf("order %s not fulfilled %v after it was created: %v", orderID, lateMatchWithin, s.effects(t, orderID))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// matchedLater counts the order's unmatched_payment items the service
// resolved as matched_later, and the open ones.
func (s *stack) matchedLater(t *testing.T, orderID string) (resolved, open int) {
	t.Helper()
	return s.count(t, `SELECT count(*) FROM reconciliation_items
			WHERE kind = 'unmatched_payment' AND order_id = $1 AND state = 'resolved' AND resolution = 'matched_later'`, orderID),
		s.count(t, "SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment' AND state = 'open'")
}

// A Yolfi payment.confirmed delivered before CreateOrder over real HTTP: it
// is stored unmatched, with an item; once the order is created it is
// applied within seconds, once — delivered again and replayed by hand, it
// grants nothing more —
// and its item is resolved as matched_later with the order.
func TestLateMatchYolfiPaymentBeforeOrder(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	paid := event(yolfi.TypePaymentConfirmed, "m-late", "inv_late")
	s.sendOK(t, paid)
	s.settle(t)
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE state = 'unmatched'"); n != 1 {
		t.Fatalf("%d unmatched events before the order exists, want 1", n)
	}

	created := time.Now()
	order := s.createOrder(t, "live", "m-late")
	took := s.waitLicenses(t, order.GetId(), 2, created)
	t.Logf("applied %v after CreateOrder", took.Round(time.Millisecond))

	s.sendOK(t, paid) // delivered again
	var id int64
	if err := s.db.QueryRow(context.Background(), "SELECT id FROM inbox_events WHERE event_id = $1", paid.ID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.ReplayInboxEvent(authed(adminToken), // and replayed by hand
		&fulfillmentv1.ReplayInboxEventRequest{InboxEventId: strconv.FormatInt(id, 10), ActorDetail: "test"}); err != nil {
		t.Fatalf("replaying the payment: %v", err)
	}
	s.settle(t)
	if e := s.effects(t, order.GetId()); e.Licenses != 2 || e.Credits != 1 || e.State != "fulfilled" {
		t.Errorf("after a redelivery and a replay by hand: %v; want fulfilled, 2 licenses and 1 credit", e)
	}
	if resolved, open := s.matchedLater(t, order.GetId()); resolved != 1 || open != 0 {
		t.Errorf("unmatched_payment items: %d resolved as matched_later with the order, %d open; want 1 and 0", resolved, open)
	}
	// The order's timeline says the payment came first.
	resp, err := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: order.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	var later int
	for _, e := range resp.GetOrder().GetHistory().GetEvents() {
		if e.GetMatchedLater() && strings.Contains(e.GetDecisionReason(), "was created after this event") {
			later++
		}
	}
	if later != 1 {
		t.Errorf("%d events of the order's timeline say they came before it, want 1: %v", later, resp.GetOrder().GetHistory().GetEvents())
	}
}

// A T-Bank payment made under a checkout session before the order that
// names it is created: AUTHORIZED and CONFIRMED are stored unmatched;
// creating the order applies both, in order, within seconds, once.
func TestLateMatchTBankPaymentBeforeOrder(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{}, nil)
	const session = "cs-tb-late"
	p := s.payAtBank(t, session, rubMinor)
	s.settle(t)
	unmatched := s.count(t, "SELECT count(*) FROM inbox_events WHERE state = 'unmatched'")
	if unmatched == 0 {
		t.Fatal("no unmatched event before the order exists")
	}

	created := time.Now()
	order := s.createRUBOrderWith(t, rubOrder{merchantOrderID: "tb-late", checkoutSessionID: session})
	took := s.waitLicenses(t, order.GetId(), 1, created)
	t.Logf("applied %v after CreateOrder", took.Round(time.Millisecond))
	s.settle(t)

	// The bank's CONFIRMED once more.
	if code, answer, err := s.deliverTBank(s.notification(t, p.PaymentID, tbank.StatusConfirmed).Body); err != nil || code != http.StatusOK || answer != "OK" {
		t.Fatalf("CONFIRMED again: %d %q %v", code, answer, err)
	}
	s.settle(t)
	if e := s.effects(t, order.GetId()); e.Licenses != 1 || e.State != "fulfilled" || e.Attempts != 1 {
		t.Errorf("after the CONFIRMED again: %v; want fulfilled, 1 license, 1 attempt", e)
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE state = 'unmatched'"); n != 0 {
		t.Errorf("%d events still unmatched, want none", n)
	}
	if resolved, open := s.matchedLater(t, order.GetId()); resolved == 0 || open != 0 {
		t.Errorf("unmatched_payment items: %d resolved as matched_later with the order, %d open; want every one resolved", resolved, open)
	}
}

// A crash right after CreateOrder commits, before any worker processed
// the payment that came first (real processes, SIGKILL at the failpoint
// order-after-create): the order and the payment's re-drive committed
// together, so the restarted service applies the payment within seconds,
// once, and a redelivery grants nothing more.
func TestLateMatchSurvivesACrashAfterTheCreate(t *testing.T) {
	t.Parallel()
	ps := newProcService(t, procFailpointBuild.binary(t))
	p := ps.start(t, "order-after-create")
	paid := event(yolfi.TypePaymentConfirmed, "m-late-crash", "inv_late_crash")
	if code, err := p.deliver(paid); err != nil || code != http.StatusOK {
		t.Fatalf("payment: %d, %v; want 200", code, err)
	}
	waitEventState(t, p.stack, paid.ID, "unmatched")
	// The answer never comes: the process dies once the create committed.
	_, err := p.client.CreateOrder(authed(orgAToken), orderRequest("live", "m-late-crash"))
	st := p.waitExit(t, 20*time.Second)
	if !daemon.Killed(st) || !strings.Contains(p.output.String(), "failpoint: killing the process at order-after-create") {
		t.Fatalf("fulfillmentd exited with %v (CreateOrder: %v); want killed at order-after-create", st, err)
	}
	var orderID string
	if err := p.db.QueryRow(context.Background(), "SELECT id FROM orders WHERE merchant_order_id = 'm-late-crash'").Scan(&orderID); err != nil {
		t.Fatalf("the order did not survive the crash: %v", err)
	}
	if row := inboxEvent(t, p.stack, paid.ID); row.State == "unmatched" {
		t.Fatalf("the payment is %v after the crash: its re-drive did not commit with the order", row)
	}

	p2 := ps.start(t, "")
	restarted := time.Now()
	took := p2.waitLicenses(t, orderID, 2, restarted)
	t.Logf("applied %v after the restart", took.Round(time.Millisecond))
	p2.sendOK(t, paid)
	p2.settle(t)
	if e := p2.effects(t, orderID); e.Licenses != 2 || e.Credits != 1 || e.State != "fulfilled" {
		t.Errorf("after the restart and a redelivery: %v; want fulfilled, 2 licenses and 1 credit", e)
	}
	if resolved, open := p2.matchedLater(t, orderID); resolved != 1 || open != 0 {
		t.Errorf("unmatched_payment items: %d resolved as matched_later, %d open; want 1 and 0", resolved, open)
	}
}
