package e2e_test

// StartPayment against the fake bank: one bank payment per attempt however
// often and however concurrently it is called, the duplicate OrderId
// policies, and the status poller when notifications do not come.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

// A started payment, paid at the bank, fulfils its order once; calling
// StartPayment again returns the same attempt and the bank has one payment.
func TestTBankStartPaymentAndPay(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{}, nil)
	order := s.createRUBOrder(t, "tb-1")

	first, err := s.startPayment(order.GetId(), tbankFail, false)
	if err != nil {
		t.Fatal(err)
	}
	if first.GetState() != "started" || first.GetPaymentUrl() == "" || first.GetAttempt() != 1 ||
		first.GetProviderOrderId() != fulfillment.ProviderOrderID(order.GetId(), 1) || first.GetAmount().GetMinorUnits() != rubMinor {
		t.Fatalf("start = %v", first)
	}
	again, err := s.startPayment(order.GetId(), tbankFail, false)
	if err != nil || again.GetPaymentId() != first.GetPaymentId() || again.GetPaymentUrl() != first.GetPaymentUrl() {
		t.Fatalf("repeated start = %v, %v; want the same attempt", again, err)
	}
	if n := len(s.bank.Payments()); n != 1 {
		t.Fatalf("the bank has %d payments, want 1", n)
	}

	if err := s.bank.Pay(first.GetPaymentId()); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)
	if e := s.effects(t, order.GetId()); e.State != "fulfilled" || e.Licenses != 1 || e.Attempts != 1 || len(e.Items) != 0 {
		t.Errorf("after payment: %v; want fulfilled, 1 license, 1 attempt, no item", e)
	}
	// AUTHORIZED then CONFIRMED, each acknowledged with exactly OK.
	notes := s.bank.Notifications()
	if len(notes) != 2 || !notes[0].Acked() || !notes[1].Acked() {
		t.Errorf("notifications %+v, want two acknowledged", notes)
	}
	got, err := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: order.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	// The start stays started; its payment shows that it was paid.
	if starts := got.GetOrder().GetHistory().GetPaymentStarts(); len(starts) != 1 || starts[0].GetPaymentId() != first.GetPaymentId() ||
		starts[0].GetState() != "started" || starts[0].GetPaymentState() != "confirmed" {
		t.Errorf("GetOrder's payment starts %v, want the one started, its payment confirmed", starts)
	}
	// A paid order starts no payment.
	if _, err := s.startPayment(order.GetId(), tbankFail, true); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("new attempt for a paid order: %v, want FAILED_PRECONDITION", err)
	}
}

// Concurrent calls for one order make one bank payment: each call gets it,
// or ABORTED while another call is asking the bank.
func TestTBankStartPaymentConcurrent(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{}, nil)
	order := s.createRUBOrder(t, "tb-1")
	var (
		mu      sync.Mutex
		ids     = map[string]int{}
		aborted int
	)
	race(12, func(int) {
		p, err := s.startPayment(order.GetId(), tbankFail, false)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case status.Code(err) == codes.Aborted:
			aborted++
		case err != nil:
			t.Error(err)
		default:
			ids[p.GetPaymentId()]++
		}
	})
	if n := len(s.bank.Payments()); n != 1 || len(ids) != 1 || aborted+ids[s.bank.Payments()[0].PaymentID] != 12 {
		t.Errorf("bank payments %d, payment ids answered %v, %d aborted; want one payment for every call that was not aborted", n, ids, aborted)
	}
}

// The bank already has a payment under the attempt's OrderId: each policy.
func TestTBankDuplicateOrderPolicies(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{}, nil)
	client, err := tbank.NewClient(s.bank.URL(), tbankTerminal, [][]byte{[]byte(tbankPassword)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// preexisting makes the bank hold a payment of amount under the first
	// attempt's OrderId of a new order, as a call whose answer was lost
	// would have; it returns the order and that payment.
	preexisting := func(t *testing.T, merchantOrderID string, amount int64) (*fulfillmentv1.Order, string) {
		t.Helper()
		order := s.createRUBOrder(t, merchantOrderID)
		p, err := client.Init(context.Background(), tbank.InitRequest{
			OrderID: fulfillment.ProviderOrderID(order.GetId(), 1), Amount: amount})
		if err != nil {
			t.Fatal(err)
		}
		return order, p.PaymentID
	}
	items := func(t *testing.T, orderID string) int {
		t.Helper()
		return s.count(t, "SELECT count(*) FROM reconciliation_items WHERE order_id = $1 AND kind = 'duplicate_order_id'", orderID)
	}

	t.Run("fail", func(t *testing.T) {
		t.Parallel()
		order, _ := preexisting(t, "dup-fail", rubMinor)
		p, err := s.startPayment(order.GetId(), tbankFail, false)
		if err != nil || p.GetState() != "failed" || p.GetPaymentId() != "" || !strings.Contains(p.GetDetail(), "policy fail") {
			t.Fatalf("start = %v, %v; want failed", p, err)
		}
		if n := items(t, order.GetId()); n != 0 {
			t.Errorf("%d items, want none", n)
		}
		next, err := s.startPayment(order.GetId(), tbankFail, false)
		if err != nil || next.GetAttempt() != 2 || next.GetState() != "started" {
			t.Errorf("call after a failed attempt = %v, %v; want attempt 2 started", next, err)
		}
	})
	t.Run("ignore", func(t *testing.T) {
		t.Parallel()
		order, _ := preexisting(t, "dup-ignore", rubMinor)
		p, err := s.startPayment(order.GetId(), tbankIgnore, false)
		if err != nil || p.GetState() != "pending_review" || p.GetPaymentId() != "" {
			t.Fatalf("start = %v, %v; want pending_review", p, err)
		}
		if n := items(t, order.GetId()); n != 1 {
			t.Errorf("%d duplicate_order_id items, want 1", n)
		}
	})
	t.Run("reuse, the attempt's own payment", func(t *testing.T) {
		t.Parallel()
		order, existing := preexisting(t, "dup-reuse", rubMinor)
		p, err := s.startPayment(order.GetId(), tbankReuse, false)
		if err != nil || p.GetState() != "started" || p.GetPaymentId() != existing {
			t.Fatalf("start = %v, %v; want the existing payment %s linked", p, err, existing)
		}
		// The other subtests make payments of their own meanwhile: count
		// this order's (its OrderIds are the order id's hex digits, a dash
		// and the attempt).
		var ofOrder []string
		for _, bp := range s.bank.Payments() {
			if strings.HasPrefix(bp.OrderID, strings.ReplaceAll(order.GetId(), "-", "")+"-") {
				ofOrder = append(ofOrder, bp.PaymentID)
			}
		}
		if len(ofOrder) != 1 {
			t.Errorf("the bank has payments %v for the order, want only %s", ofOrder, existing)
		}
		if n := items(t, order.GetId()); n != 0 {
			t.Errorf("%d items, want none", n)
		}
		if err := s.bank.Pay(existing); err != nil {
			t.Fatal(err)
		}
		s.waitBank(t)
		s.settle(t)
		if e := s.effects(t, order.GetId()); e.State != "fulfilled" || e.Licenses != 1 {
			t.Errorf("after paying the linked payment: %v", e)
		}
	})
	t.Run("reuse, another amount", func(t *testing.T) {
		t.Parallel()
		order, existing := preexisting(t, "dup-reuse-amount", rubMinor-100)
		p, err := s.startPayment(order.GetId(), tbankReuse, false)
		if err != nil || p.GetState() != "pending_review" || p.GetPaymentId() != "" ||
			!strings.Contains(p.GetDetail(), "amount 19100 RUB, not 19200 RUB") || !strings.Contains(p.GetDetail(), existing) {
			t.Fatalf("start = %v, %v; want pending_review naming the amounts", p, err)
		}
		if n := items(t, order.GetId()); n != 1 {
			t.Errorf("%d duplicate_order_id items, want 1", n)
		}
	})
}

// Notifications that do not come: the poller asks the bank and the order
// is fulfilled once; the late notifications change nothing.
func TestTBankPollWithoutNotifications(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{Misbehaviour: fakebank.Misbehaviour{Hold: true}}, func(c *config.Config) {
		c.StatusPoll = config.StatusPoll{After: time.Millisecond,
			Queue: config.Queue{Poll: 20 * time.Millisecond, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}}
	})
	order := s.createRUBOrder(t, "tb-poll")
	p, err := s.startPayment(order.GetId(), tbankFail, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.bank.Pay(p.GetPaymentId()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.effects(t, order.GetId()).State != "fulfilled" {
		if time.Now().After(deadline) {
			t.Fatalf("not fulfilled by polling: %v", s.effects(t, order.GetId()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := s.count(t, "SELECT count(*) FROM payment_polls WHERE state = 'done'"); n != 1 {
		t.Errorf("%d polls done, want 1", n)
	}
	// The held notifications arrive at last.
	if n := s.bank.Release(fakebank.InOrder); n != 2 {
		t.Fatalf("released %d notifications, want AUTHORIZED and CONFIRMED", n)
	}
	s.waitBank(t)
	s.settle(t)
	if e := s.effects(t, order.GetId()); e.State != "fulfilled" || e.Licenses != 1 || len(e.Items) != 0 {
		t.Errorf("after the late notifications: %v; want fulfilled once, no item", e)
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE decision = 'fulfilled'"); n != 1 {
		t.Errorf("%d events fulfilled the order, want 1", n)
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id LIKE 'poll:%' AND event_type = 'CONFIRMED'"); n != 1 {
		t.Errorf("%d polled confirmations stored, want 1", n)
	}
}

// An answer of the bank lost on the way back (its Init created the
// payment): the call is UNAVAILABLE, the next call asks again under the same
// OrderId, gets "already exists", and links the payment as this attempt's
// own whatever the endpoint's policy (fail here) — one bank payment. Asking
// another endpoint about that attempt is refused.
func TestTBankLostInitAnswer(t *testing.T) {
	t.Parallel()
	var (
		target atomic.Pointer[url.URL]
		lose   atomic.Bool
	)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxy := httputil.NewSingleHostReverseProxy(target.Load())
		if lose.Swap(false) {
			proxy.ServeHTTP(httptest.NewRecorder(), r)
			http.Error(w, "the answer was lost", http.StatusBadGateway)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	s := startTBank(t, fakebank.Options{}, withTBankAPI(t, tbankFail, api.URL))
	u, err := url.Parse(s.bank.URL())
	if err != nil {
		t.Fatal(err)
	}
	target.Store(u)
	order := s.createRUBOrder(t, "tb-lost")

	lose.Store(true)
	if _, err := s.startPayment(order.GetId(), tbankFail, false); status.Code(err) != codes.Unavailable {
		t.Fatalf("start with the answer lost: %v, want UNAVAILABLE", err)
	}
	if n := len(s.bank.Payments()); n != 1 {
		t.Fatalf("the bank has %d payments, want the one whose answer was lost", n)
	}
	if _, err := s.startPayment(order.GetId(), tbankReuse, false); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("asking another endpoint about the attempt: %v, want FAILED_PRECONDITION", err)
	}
	p, err := s.startPayment(order.GetId(), tbankFail, false)
	if err != nil || p.GetState() != "started" || p.GetAttempt() != 1 || p.GetPaymentId() != s.bank.Payments()[0].PaymentID {
		t.Fatalf("start again = %v, %v; want attempt 1 started with the bank's payment %s", p, err, s.bank.Payments()[0].PaymentID)
	}
	if n := len(s.bank.Payments()); n != 1 {
		t.Errorf("the bank has %d payments, want 1", n)
	}
	if err := s.bank.Pay(p.GetPaymentId()); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)
	if e := s.effects(t, order.GetId()); e.State != "fulfilled" || e.Licenses != 1 {
		t.Errorf("after paying: %v", e)
	}
}

// A started payment is one-stage whatever the terminal's default: on a
// two-stage terminal, paying confirms it and fulfils its order (the
// service confirms no held payment itself).
func TestTBankStartedPaymentIsOneStage(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{TwoStage: true}, nil)
	order := s.createRUBOrder(t, "tb-one-stage")
	start, err := s.startPayment(order.GetId(), tbankFail, false)
	if err != nil {
		t.Fatal(err)
	}
	if bp, _ := s.bank.Payment(start.GetPaymentId()); bp.TwoStage {
		t.Error("the bank's payment is two-stage, want one-stage")
	}
	if err := s.bank.Pay(start.GetPaymentId()); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)
	if e := s.effects(t, order.GetId()); e.State != "fulfilled" || e.Licenses != 1 {
		t.Errorf("after payment: %v; want fulfilled", e)
	}
}

// A token of another org learns nothing of org A's endpoints from
// StartPayment: naming one is answered as naming none (it said the
// endpoint's provider, and that it takes no started payments, or went on to
// the order).
func TestStartPaymentKeepsAnotherOrgsEndpointsUnsaid(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{}, func(c *config.Config) {
		c.Auth.Tokens = append(c.Auth.Tokens, config.Token{Name: "org-b-admin", Secret: orgBAdminToken,
			Scopes: []string{config.ScopeAdmin}, Orgs: []string{"org_b"}})
	})
	order := s.createRUBOrder(t, "tb-unsaid-1")
	var answers []string
	for _, endpoint := range []string{tbankFail, "no-such-endpoint"} {
		_, err := s.client.StartPayment(authed(orgBAdminToken), &fulfillmentv1.StartPaymentRequest{
			OrderId: order.GetId(), EndpointId: endpoint, Description: "Pro license"})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "is not a configured endpoint") {
			t.Errorf("org B starting a payment through %q: %v, want INVALID_ARGUMENT, not a configured endpoint", endpoint, err)
		}
		answers = append(answers, strings.ReplaceAll(status.Convert(err).Message(), endpoint, "E"))
	}
	if answers[0] != answers[1] {
		t.Errorf("org A's endpoint and none are told apart: %q, %q", answers[0], answers[1])
	}
	if n := len(s.bank.Payments()); n != 0 {
		t.Errorf("the bank has %d payments", n)
	}
}
