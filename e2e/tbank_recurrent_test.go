package e2e_test

// Card bindings asked for by StartPayment (options.recurrent): the Init
// the fake bank receives, and a subscription started that way and renewed
// by the bank's recurrent charges of the binding.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

// tbankPlan is the monthly plan of the recurrent tests.
const tbankPlan = "tb-monthly"

// withTBankPlan configures tbankPlan.
func withTBankPlan(c *config.Config) {
	c.Plans = append(c.Plans, config.Plan{ID: tbankPlan, Months: 1})
}

// createRUBSubscriptionOrder creates a live order of org_a for one period
// of tbankPlan for customer, at 192 RUB.
func (s *tbankStack) createRUBSubscriptionOrder(t *testing.T, merchantOrderID, customer string) *fulfillmentv1.Order {
	t.Helper()
	resp, err := s.client.CreateOrder(authed(orgAToken), &fulfillmentv1.CreateOrderRequest{
		OrgId: orgA, Environment: "live", MerchantOrderId: merchantOrderID,
		Lines: []*fulfillmentv1.OrderLine{{Sku: "pro", Kind: "subscription", Quantity: 1, PlanId: tbankPlan, AccountRef: customer,
			UnitPrice: &fulfillmentv1.Money{Currency: "RUB", MinorUnits: rubMinor}}},
	})
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	return resp.GetOrder()
}

// initRecorder is a bank API in front of the fake bank that keeps every
// Init body it forwards, and can lose the answer to an order's next Init.
type initRecorder struct {
	url  string
	lose atomic.Pointer[string] // the OrderId prefix whose next answer is lost

	mu    sync.Mutex
	inits [][]byte
}

func newInitRecorder(t *testing.T) (r *initRecorder, forward func(bankURL string)) {
	t.Helper()
	r = &initRecorder{}
	var target atomic.Pointer[url.URL]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, "unreadable", http.StatusBadRequest)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		lose := false
		if req.URL.Path == "/v2/Init" {
			r.mu.Lock()
			r.inits = append(r.inits, body)
			r.mu.Unlock()
			if p := r.lose.Load(); p != nil && bytes.Contains(body, []byte(*p)) {
				lose = r.lose.CompareAndSwap(p, nil)
			}
		}
		proxy := httputil.NewSingleHostReverseProxy(target.Load())
		if lose {
			loseAnswer(proxy, w, req)
			return
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r, func(bankURL string) {
		u, err := url.Parse(bankURL)
		if err != nil {
			t.Fatal(err)
		}
		target.Store(u)
	}
}

// attemptsOf is what an Init body of one of order's attempts contains.
func attemptsOf(orderID string) string {
	return `"OrderId":"` + strings.ReplaceAll(orderID, "-", "") + "-"
}

// loseNext loses the answer to the next Init of one of order's attempts.
func (r *initRecorder) loseNext(orderID string) {
	p := attemptsOf(orderID)
	r.lose.Store(&p)
}

// of returns the Init bodies sent for order's attempts, in the order sent.
func (r *initRecorder) of(orderID string) [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	prefix := attemptsOf(orderID)
	var out [][]byte
	for _, b := range r.inits {
		if bytes.Contains(b, []byte(prefix)) {
			out = append(out, b)
		}
	}
	return out
}

// initMembers reads an Init body's members.
func initMembers(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("Init body %s: %v", body, err)
	}
	return m
}

// binds checks that an Init body asks for a card binding under customer
// ("" for no binding: neither member sent).
func binds(t *testing.T, what string, body []byte, customer string) {
	t.Helper()
	m := initMembers(t, body)
	rec, hasRec := m["Recurrent"]
	key, hasKey := m["CustomerKey"]
	switch {
	case customer == "" && (hasRec || hasKey):
		t.Errorf("%s: the Init carries Recurrent %v and CustomerKey %v, want neither", what, rec, key)
	case customer != "" && (rec != "Y" || key != customer):
		t.Errorf("%s: the Init carries Recurrent %v and CustomerKey %v, want Y and %q", what, rec, key, customer)
	}
}

// bankPayment is the fake bank's payment that p started.
func (s *tbankStack) bankPayment(t *testing.T, p *fulfillmentv1.PaymentStart) fakebank.Payment {
	t.Helper()
	bp, ok := s.bank.Payment(p.GetPaymentId())
	if !ok {
		t.Fatalf("the bank has no payment %s", p.GetPaymentId())
	}
	return bp
}

// startedOnce starts a payment of order through endpoint, and holds the
// bank's payment to a binding for customer ("": none); with rec, which
// records the endpoint's Inits, the one Init it was asked with too.
func startedOnce(t *testing.T, s *tbankStack, rec *initRecorder, orderID, endpoint, customer string) {
	t.Helper()
	p, err := s.startPayment(orderID, endpoint, false)
	if err != nil || p.GetState() != "started" {
		t.Fatalf("start = %v, %v", p, err)
	}
	if bp := s.bankPayment(t, p); bp.Recurrent != (customer != "") || bp.CustomerKey != customer {
		t.Errorf("the bank's payment: recurrent %v, CustomerKey %q; want a binding for %q (none when empty)", bp.Recurrent, bp.CustomerKey, customer)
	}
	if rec == nil {
		return
	}
	if inits := rec.of(orderID); len(inits) != 1 {
		t.Errorf("%d Inits, want 1", len(inits))
	} else {
		binds(t, "attempt 1", inits[0], customer)
	}
}

// The Init asks for a card binding exactly when the endpoint binds cards
// (options.recurrent) and the order has a subscription line, under the
// line's customer; an attempt asked about again sends the very same request
// (same bytes, same Token), and a new attempt the same binding. A customer
// the bank cannot take is refused before anything is registered or sent.
func TestTBankRecurrentInit(t *testing.T) {
	t.Parallel()
	rec, forward := newInitRecorder(t)
	// tbankFail binds cards, through the recorder; tbankIgnore does not,
	// and goes to the bank directly.
	s := startTBank(t, fakebank.Options{}, func(c *config.Config) {
		withTBankPlan(c)
		withTBankOption(t, tbankFail, "recurrent", true)(c)
		withTBankAPI(t, tbankFail, rec.url)(c)
	})
	forward(s.bank.URL())
	t.Run("recurrent, a subscription line", func(t *testing.T) {
		t.Parallel()
		order := s.createRUBSubscriptionOrder(t, "tb-rec-sub", "user_rec_1")
		startedOnce(t, s, rec, order.GetId(), tbankFail, "user_rec_1")
	})
	t.Run("recurrent, no subscription line", func(t *testing.T) {
		t.Parallel()
		order := s.createRUBOrder(t, "tb-rec-license")
		startedOnce(t, s, rec, order.GetId(), tbankFail, "")
	})
	t.Run("not recurrent, a subscription line", func(t *testing.T) {
		t.Parallel()
		order := s.createRUBSubscriptionOrder(t, "tb-rec-off", "user_rec_2")
		startedOnce(t, s, nil, order.GetId(), tbankIgnore, "")
	})
	t.Run("asked again, then a new attempt", func(t *testing.T) {
		t.Parallel()
		order := s.createRUBSubscriptionOrder(t, "tb-rec-retry", "user_rec_3")
		rec.loseNext(order.GetId())
		if _, err := s.startPayment(order.GetId(), tbankFail, false); status.Code(err) != codes.Unavailable {
			t.Fatalf("start with the answer lost: %v, want UNAVAILABLE", err)
		}
		first, err := s.startPayment(order.GetId(), tbankFail, false)
		if err != nil || first.GetState() != "started" || first.GetAttempt() != 1 {
			t.Fatalf("start again = %v, %v; want attempt 1 linked", first, err)
		}
		second, err := s.startPayment(order.GetId(), tbankFail, true)
		if err != nil || second.GetState() != "started" || second.GetAttempt() != 2 {
			t.Fatalf("new attempt = %v, %v; want attempt 2 started", second, err)
		}
		inits := rec.of(order.GetId())
		if len(inits) != 3 {
			t.Fatalf("%d Inits, want attempt 1 twice and attempt 2", len(inits))
		}
		if !bytes.Equal(inits[0], inits[1]) {
			t.Errorf("attempt 1 asked twice with two requests:\n%s\n%s", inits[0], inits[1])
		}
		for i, body := range inits {
			binds(t, "Init "+strconv.Itoa(i+1), body, "user_rec_3")
		}
		if m := initMembers(t, inits[2]); m["OrderId"] != fulfillment.ProviderOrderID(order.GetId(), 2) {
			t.Errorf("the new attempt's OrderId %v", m["OrderId"])
		}
		for _, p := range []*fulfillmentv1.PaymentStart{first, second} {
			if bp := s.bankPayment(t, p); !bp.Recurrent || bp.CustomerKey != "user_rec_3" {
				t.Errorf("the bank's payment %s: recurrent %v, CustomerKey %q", bp.PaymentID, bp.Recurrent, bp.CustomerKey)
			}
		}
	})
	t.Run("a customer too long for the bank", func(t *testing.T) {
		t.Parallel()
		long := strings.Repeat("u", tbank.MaxCustomerKeyLen+1)
		order := s.createRUBSubscriptionOrder(t, "tb-rec-long", long)
		_, err := s.startPayment(order.GetId(), tbankFail, false)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "options.recurrent") ||
			!strings.Contains(err.Error(), "at most 36 characters") || strings.Contains(err.Error(), long) {
			t.Errorf("start: %v; want FAILED_PRECONDITION naming the option and the limit, not the customer", err)
		}
		if n := s.count(t, "SELECT count(*) FROM payment_starts WHERE order_id = $1", order.GetId()); n != 0 {
			t.Errorf("%d payment starts, want none", n)
		}
		if n := len(rec.of(order.GetId())); n != 0 {
			t.Errorf("%d Inits sent, want none", n)
		}
		// Through an endpoint that binds no cards, it is paid as any order.
		if p, err := s.startPayment(order.GetId(), tbankIgnore, false); err != nil || p.GetState() != "started" || p.GetAttempt() != 1 {
			t.Errorf("start without a binding = %v, %v; want attempt 1 started", p, err)
		}
	})
}

// An order with a subscription line, started with a card binding and
// paid: the bank's notifications name the binding (RebillId), and the
// subscription is registered under it, one period. The merchant's billing
// charges the binding (the fake bank's Charge): one more period, one more
// subscription.renewed, the order untouched. The charge's notification
// delivered again renews nothing.
func TestTBankRecurrentSubscription(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{}, func(c *config.Config) {
		withTBankPlan(c)
		withTBankOption(t, tbankFail, "recurrent", true)(c)
	})
	order := s.createRUBSubscriptionOrder(t, "tb-sub-1", "user_rec")
	paymentID := s.payStarted(t, order.GetId())
	if err := s.bank.Pay(paymentID); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)
	bp, _ := s.bank.Payment(paymentID)
	if bp.RebillID == "" {
		t.Fatalf("the bank bound no card: %+v", bp)
	}
	if e := s.effects(t, order.GetId()); e.State != "fulfilled" || len(e.Items) != 0 {
		t.Errorf("after the first payment: %v; want fulfilled, no item", e)
	}
	if got := s.subCounts(t, bp.RebillID); got.State != "active" || got.Periods != 1 || got.Renewed != 1 {
		t.Fatalf("subscription %s after the first payment: %+v; want active, one period", bp.RebillID, got)
	}
	if n := s.count(t, `SELECT count(*) FROM subscriptions WHERE customer_ref = 'user_rec' AND plan_id = $1`, tbankPlan); n != 1 {
		t.Errorf("%d subscriptions of user_rec, want 1 (under the binding)", n)
	}

	charge, err := s.bank.Charge(bp.RebillID, "billing-2", rubMinor)
	if err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)
	if r := inboxEvent(t, s.stack, tbankEventID(charge, tbank.StatusConfirmed)); r.Decision != "renewed" {
		t.Errorf("the charge's CONFIRMED: %v, want renewed", r)
	}
	want := subCounts{State: "active", Periods: 2, Renewed: 2}
	check := func(when string) {
		t.Helper()
		got := s.subCounts(t, bp.RebillID)
		if got.State != want.State || got.Periods != want.Periods || got.Renewed != want.Renewed {
			t.Errorf("%s: subscription %+v; want active, two periods, two subscription.renewed", when, got)
		}
		if n := s.count(t, `SELECT count(*) FROM subscription_periods WHERE period_key = $1`, "payment:"+charge); n != 1 {
			t.Errorf("%s: %d periods paid by the charge, want 1", when, n)
		}
		if e := s.effects(t, order.GetId()); e.State != "fulfilled" || e.Attempts != 1 || len(e.Items) != 0 {
			t.Errorf("%s: the order %v; want untouched: fulfilled, its one attempt, no item", when, e)
		}
	}
	check("after the charge")

	dup := s.notification(t, charge, tbank.StatusConfirmed)
	for range 2 {
		if code, answer, err := s.deliverTBank(dup.Body); err != nil || code != http.StatusOK || answer != "OK" {
			t.Fatalf("the charge's CONFIRMED again: %d %q %v, want 200 OK", code, answer, err)
		}
	}
	s.settle(t)
	check("after the charge's notification again")
}
