package tbank_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

// paymentsOf is the payment provider of a live T-Bank endpoint of org_a
// whose terminal is the fake bank's, with the duplicate OrderId policy.
func paymentsOf(t *testing.T, bank *fakebank.Bank, policy string) fulfillment.StatePoller {
	t.Helper()
	return paymentsWith(t, bank, map[string]any{"duplicate_order_policy": policy})
}

// paymentsWith is paymentsOf with more options.
func paymentsWith(t *testing.T, bank *fakebank.Bank, more map[string]any) fulfillment.StatePoller {
	t.Helper()
	o := map[string]any{"terminal_key": "T1DEMO", "api_url": bank.URL(), "duplicate_order_codes": []string{fakebank.CodeDuplicateOrder}}
	maps.Copy(o, more)
	var opts yaml.Node
	if err := opts.Encode(o); err != nil {
		t.Fatal(err)
	}
	ep := fulfillment.Endpoint{ID: "tbank-live", Provider: fulfillment.ProviderTBank, OrgID: "org_a", Environment: fulfillment.EnvLive}
	a, err := tbank.New(ep, [][]byte{[]byte("Dfsfh56dgKl")}, &opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.(ingest.PaymentTaker).Payments(nil)
	if err != nil {
		t.Fatal(err)
	}
	sp, ok := p.(fulfillment.StatePoller)
	if !ok {
		t.Fatal("a T-Bank terminal reports payment states, but is no StatePoller")
	}
	return sp
}

func TestPaymentsStartAndPoll(t *testing.T) {
	t.Parallel()
	bank, err := fakebank.New(fakebank.Options{TerminalKey: "T1DEMO", Password: []byte("Dfsfh56dgKl")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bank.Close() }()
	p := paymentsOf(t, bank, "reuse")
	if p.Account() != "T1DEMO" || p.Currency() != "RUB" || p.DuplicatePolicy() != fulfillment.PolicyReuse {
		t.Errorf("account %q, currency %q, policy %q", p.Account(), p.Currency(), p.DuplicatePolicy())
	}
	ctx := context.Background()
	start := fulfillment.ProviderStart{ProviderOrderID: "abc-1", Amount: fulfillment.Money{Currency: "RUB", MinorUnits: 19200}}
	started, err := p.StartPayment(ctx, start)
	if err != nil || started.PaymentID == "" || started.URL == "" || started.ProviderOrderID != "abc-1" || started.Account != "T1DEMO" {
		t.Fatalf("start = %+v, %v", started, err)
	}

	// The same OrderId again: a duplicate, naming the existing payment.
	_, err = p.StartPayment(ctx, start)
	var refusal *fulfillment.ProviderRefusal
	if !errors.As(err, &refusal) || !refusal.Duplicate || refusal.PaymentID != started.PaymentID {
		t.Errorf("second start = %v, want a duplicate refusal naming %s", err, started.PaymentID)
	}

	state := func(wantStatus string) fulfillment.ProviderPayment {
		t.Helper()
		got, err := p.PaymentState(ctx, started.PaymentID)
		if err != nil || got.Status != wantStatus || got.Amount.MinorUnits != 19200 || got.ProviderOrderID != "abc-1" {
			t.Fatalf("state = %+v, %v; want %s", got, err, wantStatus)
		}
		return got
	}
	ev, raw, final, err := p.PolledEvent(state(tbank.StatusNew))
	if err != nil || final || ev.Kind != fulfillment.EventAttemptCreated || len(raw) == 0 {
		t.Errorf("polled NEW = %+v, final %v, %v; want an attempt under way", ev, final, err)
	}
	if err := bank.Pay(started.PaymentID); err != nil {
		t.Fatal(err)
	}
	ev, _, final, err = p.PolledEvent(state(tbank.StatusConfirmed))
	wantID := "poll:T1DEMO:" + started.PaymentID + ":CONFIRMED"
	if err != nil || !final || ev.Kind != fulfillment.EventPaymentConfirmed || ev.EventID != wantID ||
		ev.Payment.CheckoutSessionID != "abc-1" || ev.Payment.Amount.String() != fulfillment.MinorAmount(19200, "RUB").String() ||
		ev.EndpointID != "tbank-live" || ev.Refs[tbank.RefSource] != "GetState" {
		t.Errorf("polled CONFIRMED = %+v, final %v, %v; want a final confirmation %s", ev, final, err, wantID)
	}

	// Partly refunded: GetState's Amount is the payment's, so the event
	// says the payment is partly refunded, not by how much.
	if err := bank.Cancel(started.PaymentID, 5000); err != nil {
		t.Fatal(err)
	}
	ev, _, final, err = p.PolledEvent(state(tbank.StatusPartialRefunded))
	if err != nil || !final || ev.Kind != fulfillment.EventPartiallyRefunded || ev.Payment.Amount.Known() ||
		ev.EventID != "poll:T1DEMO:"+started.PaymentID+":PARTIAL_REFUNDED:19200" {
		t.Errorf("polled PARTIAL_REFUNDED = %+v, final %v, %v; want a final partial refund of no amount", ev, final, err)
	}

	if _, err := p.PaymentState(ctx, "999999999"); !errors.As(err, &refusal) || refusal.Duplicate {
		t.Errorf("state of an unknown payment = %v, want a refusal", err)
	}
}

// The bank not answering is no refusal: the caller cannot know whether it
// acted.
func TestPaymentsNoAnswer(t *testing.T) {
	t.Parallel()
	bank, err := fakebank.New(fakebank.Options{TerminalKey: "T1DEMO", Password: []byte("Dfsfh56dgKl")})
	if err != nil {
		t.Fatal(err)
	}
	p := paymentsOf(t, bank, "fail")
	_ = bank.Close()
	_, err = p.StartPayment(context.Background(), fulfillment.ProviderStart{ProviderOrderID: "abc-1", Amount: fulfillment.Money{Currency: "RUB", MinorUnits: 100}})
	var refusal *fulfillment.ProviderRefusal
	if err == nil || errors.As(err, &refusal) {
		t.Errorf("start at a closed bank = %v, want an error that is no refusal", err)
	}
}

// startOn starts a payment of 192 RUB for order abc-1 at a fake bank of
// opts (its terminal T1DEMO), through a live endpoint's provider.
func startOn(t *testing.T, opts fakebank.Options) (*fakebank.Bank, fulfillment.StatePoller, fulfillment.ProviderPayment) {
	t.Helper()
	opts.TerminalKey, opts.Password = "T1DEMO", []byte("Dfsfh56dgKl")
	bank, err := fakebank.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bank.Close() })
	p := paymentsOf(t, bank, "fail")
	started, err := p.StartPayment(context.Background(),
		fulfillment.ProviderStart{ProviderOrderID: "abc-1", Amount: fulfillment.Money{Currency: "RUB", MinorUnits: 19200}})
	if err != nil {
		t.Fatal(err)
	}
	return bank, p, started
}

// The service fulfils on CONFIRMED and confirms nothing itself: it asks
// for one-stage payments (PayType O) whatever the terminal's default, so a
// two-stage terminal does not hold a paid payment in AUTHORIZED for good.
func TestPaymentsOneStage(t *testing.T) {
	t.Parallel()
	bank, p, started := startOn(t, fakebank.Options{TwoStage: true})
	ctx := context.Background()
	if err := bank.Pay(started.PaymentID); err != nil {
		t.Fatal(err)
	}
	if got, err := p.PaymentState(ctx, started.PaymentID); err != nil || got.Status != tbank.StatusConfirmed {
		t.Errorf("paid on a two-stage terminal: %+v, %v; want CONFIRMED", got, err)
	}
}

// A payment the bank reports authorized and not yet confirmed is held:
// the payer's money is reserved, not taken. Neither before the payer pays
// nor once it is confirmed is it.
func TestPaymentsHeld(t *testing.T) {
	t.Parallel()
	bank, p, started := startOn(t, fakebank.Options{ConfirmLater: true})
	ctx := context.Background()
	state := func(want string, held bool) fulfillment.ProviderPayment {
		t.Helper()
		got, err := p.PaymentState(ctx, started.PaymentID)
		if err != nil || got.Status != want || got.Held != held {
			t.Fatalf("state = %+v, %v; want %s, held %v", got, err, want, held)
		}
		return got
	}
	state(tbank.StatusNew, false)
	if err := bank.Pay(started.PaymentID); err != nil {
		t.Fatal(err)
	}
	if _, _, final, err := p.PolledEvent(state(tbank.StatusAuthorized, true)); err != nil || final {
		t.Errorf("polled AUTHORIZED: final %v, %v; want it polled again", final, err)
	}
	if err := bank.Confirm(started.PaymentID); err != nil {
		t.Fatal(err)
	}
	state(tbank.StatusConfirmed, false)
}

// With recurrent on, the start of an order with a subscription line asks
// the bank to bind the card under the line's customer; with it off, or for
// an order without one, the Init is as before. The bank (the fake, over
// HTTP) checks the Token over the members sent. A customer the bank cannot
// take is refused before anything is sent.
func TestPaymentsRecurrent(t *testing.T) {
	t.Parallel()
	bank, err := fakebank.New(fakebank.Options{TerminalKey: "T1DEMO", Password: []byte("Dfsfh56dgKl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bank.Close() })
	on := paymentsWith(t, bank, map[string]any{"recurrent": true})
	off := paymentsWith(t, bank, nil)
	rub := fulfillment.Money{Currency: "RUB", MinorUnits: 19200}
	cases := []struct {
		name      string
		p         fulfillment.PaymentProvider
		customer  string
		recurrent bool
	}{
		{"on, a subscription line", on, "user_42", true},
		{"on, no subscription line", on, "", false},
		{"off, a subscription line", off, "user_42", false},
		{"on, the longest customer", on, strings.Repeat("ж", tbank.MaxCustomerKeyLen), true},
	}
	for i, tc := range cases {
		s := fulfillment.ProviderStart{ProviderOrderID: "rec-" + strconv.Itoa(i), Amount: rub, CustomerRef: tc.customer}
		if err := tc.p.CheckStart(s); err != nil {
			t.Errorf("%s: CheckStart: %v", tc.name, err)
		}
		started, err := tc.p.StartPayment(context.Background(), s)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, _ := bank.Payment(started.PaymentID)
		wantKey := ""
		if tc.recurrent {
			wantKey = tc.customer
		}
		if got.Recurrent != tc.recurrent || got.CustomerKey != wantKey {
			t.Errorf("%s: the bank's payment is recurrent %v with CustomerKey %q; want %v, %q", tc.name, got.Recurrent, got.CustomerKey,
				tc.recurrent, wantKey)
		}
	}

	long := fulfillment.ProviderStart{ProviderOrderID: "rec-long", Amount: rub, CustomerRef: strings.Repeat("u", tbank.MaxCustomerKeyLen+1)}
	err = on.CheckStart(long)
	if err == nil || !strings.Contains(err.Error(), "options.recurrent") || !strings.Contains(err.Error(), "account_ref") ||
		!strings.Contains(err.Error(), "at most 36 characters") || strings.Contains(err.Error(), long.CustomerRef) {
		t.Errorf("CheckStart of a 37-character customer: %v, want it refused naming the option, the field and the limit, not the value", err)
	}
	if err := off.CheckStart(long); err != nil {
		t.Errorf("CheckStart without recurrent: %v, want nil (no CustomerKey is sent)", err)
	}
	before := len(bank.Payments())
	var refusal *fulfillment.ProviderRefusal
	if _, err := on.StartPayment(context.Background(), long); !errors.As(err, &refusal) || refusal.Code != "not sent" {
		t.Errorf("start of a 37-character customer: %v, want a refusal, nothing sent", err)
	}
	if n := len(bank.Payments()); n != before {
		t.Errorf("the bank has %d payments, want %d", n, before)
	}
}
