package e2e_test

// A status poll that keeps failing: the bank's GetState unreachable, then
// back. Two replicas poll; each payment whose poll gave up without an
// answer has one poll_failing item, shown by the API and fulfillctl.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

// How the failing bank API answers GetState.
const (
	getStateOK      int32 = iota
	getStateHTTP503       // the bank answers 503
	getStateDropped       // the connection is closed without an answer
)

// failingBankAPI is the fake bank's API behind a proxy that fails GetState
// as mode says (Init and the rest pass), counting the GetState calls.
type failingBankAPI struct {
	url      string
	target   atomic.Pointer[url.URL]
	mode     atomic.Int32
	getState atomic.Int32
}

func newFailingBankAPI(t *testing.T) *failingBankAPI {
	t.Helper()
	a := &failingBankAPI{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxy := httputil.NewSingleHostReverseProxy(a.target.Load())
		if !strings.HasSuffix(r.URL.Path, "/GetState") {
			proxy.ServeHTTP(w, r)
			return
		}
		a.getState.Add(1)
		switch a.mode.Load() {
		case getStateHTTP503:
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		case getStateDropped:
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

// forwardTo sends what the proxy passes to bank.
func (a *failingBankAPI) forwardTo(t *testing.T, bank *fakebank.Bank) {
	t.Helper()
	u, err := url.Parse(bank.URL())
	if err != nil {
		t.Fatal(err)
	}
	a.target.Store(u)
}

// pollFast polls started payments at once, 3 times, 20 to 40 ms apart,
// asking the bank through api.
func pollFast(t *testing.T, api *failingBankAPI) func(*config.Config) {
	t.Helper()
	return func(c *config.Config) {
		c.StatusPoll = config.StatusPoll{After: time.Millisecond, Queue: config.Queue{Workers: 2, MaxAttempts: 3,
			Poll: 20 * time.Millisecond, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}}
		withTBankAPI(t, tbankFail, api.url)(c)
	}
}

// The bank's GetState fails for every poll of four payments, answered 503
// to two and dropped for the others, with two replicas polling: each
// payment's poll is failed after its 3 attempts and has exactly one
// poll_failing item naming its order and payment start, the endpoint, the
// attempts and the last error — never the bank's address. The API lists
// it, shows its evidence and counts it; fulfillctl shows it. The bank
// back, a notification pays one order: its item stays open, nothing opens
// another; a new attempt's poll the bank answers opens none.
func TestTBankPollFailing(t *testing.T) {
	t.Parallel()
	api := newFailingBankAPI(t)
	s := startTBank(t, fakebank.Options{}, pollFast(t, api))
	api.forwardTo(t, s.bank)
	api.mode.Store(getStateHTTP503)
	// A second replica, with a webhook address of its own at the bank.
	relay2 := newTBankRelay(t)
	r2 := startReplicaWith(t, s.dbURL, func(c *config.Config) {
		c.Endpoints = append(c.Endpoints, tbankEndpoints(t, s.bank, relay2, config.Secret{Value: []byte(tbankPassword)})...)
		pollFast(t, api)(c)
	})
	relay2.forwardTo(t, r2.ingestURL)

	type payment struct {
		order *fulfillmentv1.Order
		start *fulfillmentv1.PaymentStart
	}
	var payments []payment
	for i, merchantID := range []string{"tb-pf-1", "tb-pf-2", "tb-pf-3", "tb-pf-4"} {
		if i == 2 {
			waitFor(t, "two polls failed", func() bool {
				return s.count(t, "SELECT count(*) FROM payment_polls WHERE state = 'failed'") == 2
			})
			api.mode.Store(getStateDropped)
		}
		order := s.createRUBOrder(t, merchantID)
		p, err := s.startPayment(order.GetId(), tbankFail, false)
		if err != nil {
			t.Fatal(err)
		}
		payments = append(payments, payment{order, p})
	}
	waitFor(t, "four polls failed", func() bool {
		return s.count(t, "SELECT count(*) FROM payment_polls WHERE state = 'failed'") == 4
	})
	if n := api.getState.Load(); n < 12 {
		t.Errorf("the bank was asked %d times, want 3 per payment at least", n)
	}
	if n := s.count(t, "SELECT count(*) FROM reconciliation_items"); n != 4 {
		t.Fatalf("%d items, want one per payment (4)", n)
	}

	// The API: listed for the org, one per payment start, with its
	// evidence.
	list, err := s.client.ListReconciliationItems(authed(orgAToken), &fulfillmentv1.ListReconciliationItemsRequest{Kind: "poll_failing"})
	if err != nil || len(list.GetItems()) != 4 {
		t.Fatalf("ListReconciliationItems(poll_failing) = %d items, %v; want 4", len(list.GetItems()), err)
	}
	byOrder := map[string]*fulfillmentv1.ReconciliationItem{}
	for _, it := range list.GetItems() {
		byOrder[it.GetOrderId()] = it
	}
	for i, p := range payments {
		it := byOrder[p.order.GetId()]
		if it == nil {
			t.Fatalf("no item for order %s", p.order.GetId())
		}
		lastError := "HTTP 503"
		if i >= 2 {
			lastError = "connection lost"
		}
		for _, want := range []string{"payment " + p.start.GetPaymentId() + " at endpoint " + tbankFail,
			"gave up after 3 attempts, none of them answered", "asking " + tbankFail + " for payment " + p.start.GetPaymentId(),
			lastError, "stays open until a person resolves it"} {
			if !strings.Contains(it.GetDetail(), want) {
				t.Errorf("order %d's item detail %q does not say %q", i, it.GetDetail(), want)
			}
		}
		for _, secret := range []string{"127.0.0.1", api.url, tbankPassword, "Token"} {
			if strings.Contains(it.GetDetail(), secret) {
				t.Errorf("order %d's item detail %q shows %q", i, it.GetDetail(), secret)
			}
		}
		if it.GetState() != "open" || it.GetPaymentId() != p.start.GetPaymentId() || it.GetProvider() != "tbank" ||
			it.GetPaymentStartId() == "" || it.GetCurrency() != "RUB" || it.GetAmount() != "19200" {
			t.Errorf("order %d's item %v", i, it)
		}
		got, err := s.client.GetReconciliationItem(authed(orgAToken), &fulfillmentv1.GetReconciliationItemRequest{ItemId: it.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		ev := got.GetEvidence()
		if ev.GetOrder().GetId() != p.order.GetId() || ev.GetPaymentStart().GetPaymentId() != p.start.GetPaymentId() ||
			ev.GetPaymentStart().GetProviderOrderId() != p.start.GetProviderOrderId() || ev.GetPaymentStart().GetEndpointId() != tbankFail {
			t.Errorf("order %d's item evidence: order %s, payment start %v", i, ev.GetOrder().GetId(), ev.GetPaymentStart())
		}
	}
	if n := s.count(t, `SELECT count(*) FROM reconciliation_items r JOIN payment_starts s ON s.id = r.payment_start_id
		WHERE r.kind = 'poll_failing' AND r.order_id = s.order_id AND r.payment_id = s.payment_id`); n != 4 {
		t.Errorf("%d items name their own order and payment, want 4", n)
	}
	sum, err := s.client.GetReconciliationSummary(authed(orgAToken), &fulfillmentv1.GetReconciliationSummaryRequest{})
	if err != nil || len(sum.GetSummaries()) != 1 {
		t.Fatalf("summary = %v, %v", sum, err)
	}
	counted := int64(0)
	for _, k := range sum.GetSummaries()[0].GetOpenByKind() {
		if k.GetKind() == "poll_failing" {
			counted = k.GetOpen()
		}
	}
	if counted != 4 || sum.GetSummaries()[0].GetOpenItems() != 4 {
		t.Errorf("summary %v; want 4 open poll_failing items", sum.GetSummaries()[0])
	}

	// fulfillctl, the built binary, shows them.
	ctl := buildFulfillctl(t)
	out := runCtl(t, ctl, s.grpcAddr, "recon", "list", "--kind", "poll_failing")
	for _, p := range payments {
		if !strings.Contains(out, p.order.GetId()) {
			t.Errorf("recon list does not show order %s:\n%s", p.order.GetId(), out)
		}
	}
	if n := strings.Count(out, "poll_failing"); n != 4 {
		t.Errorf("recon list shows %d poll_failing items, want 4:\n%s", n, out)
	}
	first := byOrder[payments[0].order.GetId()]
	out = runCtl(t, ctl, s.grpcAddr, "recon", "get", first.GetId())
	for _, want := range []string{"poll_failing", "payment start", first.GetPaymentStartId(), payments[0].order.GetId(),
		"gave up after 3 attempts"} {
		if !strings.Contains(out, want) {
			t.Errorf("recon get does not show %q:\n%s", want, out)
		}
	}
	if out := runCtl(t, ctl, s.grpcAddr, "recon", "summary"); !strings.Contains(out, "poll_failing=4") {
		t.Errorf("recon summary does not count the items:\n%s", out)
	}

	// The bank is back. The payer of the first order pays: the
	// notification pays it, and its item stays open for a person.
	api.mode.Store(getStateOK)
	if err := s.bank.Pay(payments[0].start.GetPaymentId()); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)
	if e := s.effects(t, payments[0].order.GetId()); e.State != "fulfilled" || e.Licenses != 1 || e.Items["poll_failing"] != 1 {
		t.Errorf("after the notification: %v; want fulfilled, its one poll_failing item kept", e)
	}
	// A new attempt for the second order: the bank answers its polls (not
	// paid yet), which opens nothing, then the payer pays.
	again, err := s.startPayment(payments[1].order.GetId(), tbankFail, true)
	if err != nil || again.GetAttempt() != 2 {
		t.Fatalf("new attempt = %v, %v", again, err)
	}
	waitFor(t, "done polling the new attempt", func() bool {
		return s.count(t, "SELECT count(*) FROM payment_polls WHERE state = 'failed'") == 5
	})
	if err := s.bank.Pay(again.GetPaymentId()); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)
	if e := s.effects(t, payments[1].order.GetId()); e.State != "fulfilled" || e.Items["poll_failing"] != 1 {
		t.Errorf("after the new attempt: %v; want fulfilled, with the first attempt's item only", e)
	}
	if n := s.count(t, "SELECT count(*) FROM reconciliation_items WHERE kind = 'poll_failing' AND state = 'open'"); n != 4 {
		t.Errorf("%d open poll_failing items, want the 4 opened", n)
	}
	if n := s.count(t, "SELECT count(*) FROM reconciliation_items"); n != 4 {
		t.Errorf("%d items in all, want 4", n)
	}

	// It resolves like any other item.
	if out := runCtl(t, ctl, s.grpcAddr, "recon", "resolve", first.GetId(), "--resolution", "no_action",
		"--note", "paid at the bank; the notification fulfilled the order"); !strings.Contains(out, "resolved as no_action") {
		t.Errorf("recon resolve: %s", out)
	}
	if n := s.count(t, "SELECT count(*) FROM reconciliation_items WHERE kind = 'poll_failing' AND state = 'open'"); n != 3 {
		t.Errorf("%d open poll_failing items after resolving one, want 3", n)
	}
}

// A payment the bank leaves authorized — paid by the payer, the money held
// on the card, never confirmed — is not "never paid": its poll, answered
// AUTHORIZED to the end, opens one poll_failing item that says the money
// is held. The order stays unpaid meanwhile; the bank's confirmation,
// when it comes, fulfils it once, and the item stays open for a person.
func TestTBankPollLeftHeld(t *testing.T) {
	t.Parallel()
	api := newFailingBankAPI(t)
	s := startTBank(t, fakebank.Options{ConfirmLater: true}, pollFast(t, api))
	api.forwardTo(t, s.bank)
	order := s.createRUBOrder(t, "tb-held-1")
	p, err := s.startPayment(order.GetId(), tbankFail, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.bank.Pay(p.GetPaymentId()); err != nil { // AUTHORIZED, and left so
		t.Fatal(err)
	}
	waitFor(t, "the poll failed", func() bool {
		return s.count(t, "SELECT count(*) FROM payment_polls WHERE state = 'failed'") == 1
	})
	s.waitBank(t)
	s.settle(t)
	if e := s.effects(t, order.GetId()); e.State != "pending_payment" || e.Licenses != 0 || e.Items["poll_failing"] != 1 {
		t.Fatalf("left AUTHORIZED: %v; want unpaid, no license, one poll_failing item", e)
	}
	list, err := s.client.ListReconciliationItems(authed(orgAToken), &fulfillmentv1.ListReconciliationItemsRequest{Kind: "poll_failing"})
	if err != nil || len(list.GetItems()) != 1 {
		t.Fatalf("ListReconciliationItems(poll_failing) = %d items, %v; want 1", len(list.GetItems()), err)
	}
	for _, want := range []string{"payment " + p.GetPaymentId() + " at endpoint " + tbankFail + " stopped after 3 attempts with the payment AUTHORIZED",
		"the payer's money is held there"} {
		if d := list.GetItems()[0].GetDetail(); !strings.Contains(d, want) {
			t.Errorf("item detail %q does not say %q", d, want)
		}
	}

	if err := s.bank.Confirm(p.GetPaymentId()); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)
	if e := s.effects(t, order.GetId()); e.State != "fulfilled" || e.Licenses != 1 || e.Items["poll_failing"] != 1 || len(e.Items) != 1 {
		t.Errorf("confirmed at last: %v; want fulfilled, one license, the poll_failing item kept and no other", e)
	}
}

// buildFulfillctl builds cmd/fulfillctl into a temporary folder.
func buildFulfillctl(t *testing.T) string {
	t.Helper()
	root, err := daemon.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "fulfillctl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/fulfillctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fulfillctl: %v\n%s", err, out)
	}
	return bin
}

// runCtl runs fulfillctl against the API at grpcAddr as the admin and
// returns its output; it must succeed.
func runCtl(t *testing.T, bin, grpcAddr string, args ...string) string {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(adminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, append([]string{"--addr", grpcAddr, "--token-file", tokenFile}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fulfillctl %q: %v\n%s", args, err, out)
	}
	return string(out)
}
