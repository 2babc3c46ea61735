package e2e_test

// The T-Bank acceptance scenarios (two identical CONFIRMED, AUTHORIZED after
// CONFIRMED, concurrent completion, bad Token, amount mismatch, refund after
// payment, PaymentId as a string or a number) against the fake bank: each
// counts what the order got — licenses, ledger rows, reconciliation items,
// inbox rows and their decisions, order events — and what the bank was
// answered. The crash after the status write is in tbank_crash_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

// Two identical CONFIRMED, sent at the same time (and the AUTHORIZED before
// it, twice too): one inbox row per dedup key, both copies of each
// acknowledged with OK, one license, the order fulfilled once.
func TestTBankTwoIdenticalConfirmed(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{Misbehaviour: fakebank.Misbehaviour{Repeat: 2}}, nil)
	order := s.createRUBOrder(t, "tb-twice")
	pay := s.payStarted(t, order.GetId())
	if err := s.bank.Pay(pay); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)

	if got := s.acked(t, 2); !equalStrings(got, tbank.StatusAuthorized, tbank.StatusConfirmed) {
		t.Errorf("notified %v, want AUTHORIZED and CONFIRMED", got)
	}
	for _, status := range []string{tbank.StatusAuthorized, tbank.StatusConfirmed} {
		if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = $1", tbankEventID(pay, status)); n != 1 {
			t.Errorf("%s stored %d times, want once", status, n)
		}
	}
	want := paidOnce(s.authorizedDecision(t, pay))
	if got := s.orderCounts(t, order.GetId()); !got.equal(want) {
		t.Errorf("order: %v\nwant   %v", got, want)
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events"); n != 2 {
		t.Errorf("%d inbox rows, want 2", n)
	}
}

// AUTHORIZED arriving after CONFIRMED: the fulfilled order does not move
// back, the attempt stays confirmed, one license.
func TestTBankAuthorizedAfterConfirmed(t *testing.T) {
	t.Parallel()
	// Both held, then sent in reverse order: AUTHORIZED goes out once
	// CONFIRMED is stored, a few milliseconds later, usually before
	// CONFIRMED is processed. Two workers may then claim them, and the
	// first to lock the order decides first: AUTHORIZED is recorded either
	// as the attempt (decided first) or as stale.
	t.Run("released in reverse", func(t *testing.T) {
		t.Parallel()
		s := startTBank(t, fakebank.Options{Misbehaviour: fakebank.Misbehaviour{Hold: true}}, nil)
		order := s.createRUBOrder(t, "tb-late-auth")
		pay := s.payStarted(t, order.GetId())
		if err := s.bank.Pay(pay); err != nil {
			t.Fatal(err)
		}
		if n := s.bank.Release(fakebank.Reversed); n != 2 {
			t.Fatalf("released %d notifications, want AUTHORIZED and CONFIRMED", n)
		}
		s.waitBank(t)
		s.settle(t)
		auth := s.authorizedDecision(t, pay)
		// Release sends the second once the first is acknowledged, so
		// stored: CONFIRMED was stored first.
		if got, want := s.decisionsByArrival(t, order.GetId()), "CONFIRMED=fulfilled,AUTHORIZED="+auth; got != want {
			t.Errorf("decisions in order of arrival: %s; want %s", got, want)
		}
		want := paidOnce(auth)
		if got := s.orderCounts(t, order.GetId()); !got.equal(want) {
			t.Errorf("order: %v\nwant   %v", got, want)
		}
		if got := s.attemptStates(t, order.GetId()); got != "confirmed" {
			t.Errorf("payment attempts: %s, want one confirmed", got)
		}
		s.acked(t, 1)
	})
	// A two-stage payment whose AUTHORIZED is held while its CONFIRMED is
	// delivered and processed: the AUTHORIZED released then is stale and
	// ignored.
	t.Run("after processing", func(t *testing.T) {
		t.Parallel()
		s := startTBank(t, fakebank.Options{ConfirmLater: true, Misbehaviour: fakebank.Misbehaviour{Hold: true}}, nil)
		order := s.createRUBOrder(t, "tb-late-auth")
		pay := s.payStarted(t, order.GetId())
		if err := s.bank.Pay(pay); err != nil {
			t.Fatal(err)
		}
		s.bank.SetMisbehaviour(fakebank.Misbehaviour{})
		if err := s.bank.Confirm(pay); err != nil {
			t.Fatal(err)
		}
		s.waitBank(t)
		s.settle(t)
		if n := s.bank.Release(fakebank.InOrder); n != 1 {
			t.Fatalf("released %d notifications, want AUTHORIZED", n)
		}
		s.waitBank(t)
		s.settle(t)
		if got, want := s.decisionsByArrival(t, order.GetId()), "CONFIRMED=fulfilled,AUTHORIZED=stale_ignored"; got != want {
			t.Errorf("decisions in order of arrival: %s; want %s", got, want)
		}
		want := paidOnce("stale_ignored")
		if got := s.orderCounts(t, order.GetId()); !got.equal(want) {
			t.Errorf("order: %v\nwant   %v", got, want)
		}
		if got := s.attemptStates(t, order.GetId()); got != "confirmed" {
			t.Errorf("payment attempts: %s, want one confirmed", got)
		}
		if got := s.acked(t, 1); !equalStrings(got, tbank.StatusAuthorized, tbank.StatusConfirmed) {
			t.Errorf("notified %v", got)
		}
	})
}

// Concurrent completion: many orders paid at once, each CONFIRMED posted
// several times at the same moment, then the bank's own notifications
// (each sent three times at once) released in a shuffled order: every
// order is fulfilled exactly once.
func TestTBankConcurrentCompletion(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{Misbehaviour: fakebank.Misbehaviour{Hold: true, Repeat: 3}}, nil)
	const orders, copies = 8, 5
	ids, pays := make([]string, orders), make([]string, orders)
	for i := range orders {
		ids[i] = s.createRUBOrder(t, fmt.Sprintf("tb-many-%d", i)).GetId()
		pays[i] = s.payStarted(t, ids[i])
	}
	payErrs := make([]error, orders)
	race(orders, func(i int) { payErrs[i] = s.bank.Pay(pays[i]) })
	for i, err := range payErrs {
		if err != nil {
			t.Fatalf("paying %s: %v", pays[i], err)
		}
	}

	// Every order's CONFIRMED, copies times, all at once, ahead of the bank.
	bodies := make([][]byte, orders)
	for i := range orders {
		bodies[i] = s.notification(t, pays[i], tbank.StatusConfirmed).Body
	}
	answers := make([]string, orders*copies)
	race(orders*copies, func(k int) {
		code, answer, err := s.deliverTBank(bodies[k%orders])
		answers[k] = fmt.Sprintf("%d %s %v", code, answer, err)
	})
	for k, a := range answers {
		if a != "200 OK <nil>" {
			t.Errorf("delivery %d of order %d's CONFIRMED answered %q, want 200 OK", k/orders, k%orders, a)
		}
	}
	if n := s.bank.Release(fakebank.Shuffled); n != 2*orders {
		t.Fatalf("released %d notifications, want %d", n, 2*orders)
	}
	s.waitBank(t)
	s.settle(t)

	if got := s.acked(t, 3); len(got) != 2*orders {
		t.Errorf("the bank made %d notifications, want %d", len(got), 2*orders)
	}
	for i, id := range ids {
		want := paidOnce(s.authorizedDecision(t, pays[i]))
		if got := s.orderCounts(t, id); !got.equal(want) {
			t.Errorf("order %d: %v\nwant   %v", i, got, want)
		}
	}
	for q, want := range map[string]int{
		"SELECT count(*) FROM inbox_events":                              2 * orders,
		"SELECT count(*) FROM inbox_events WHERE decision = 'fulfilled'": orders,
		"SELECT count(*) FROM entitlements":                              orders,
		"SELECT count(DISTINCT value) FROM entitlements":                 orders,
		"SELECT count(*) FROM reconciliation_items":                      0,
	} {
		if got := s.count(t, q); got != want {
			t.Errorf("%s = %d, want %d", q, got, want)
		}
	}
}

// A bad Token: every attempt of every notification is answered 401 (never
// OK) and retried by the bank, nothing is stored, nothing granted. The
// fake bank sends the same body on each retry, so the wrong Token never
// heals by itself; the same notifications signed with the right password —
// the bank's later retries once the terminal's password is right — are
// then applied, once, however often they come.
func TestTBankBadToken(t *testing.T) {
	t.Parallel()
	const retries = 2
	s := startTBank(t, fakebank.Options{Retries: retries, Misbehaviour: fakebank.Misbehaviour{WrongToken: true}}, nil)
	order := s.createRUBOrder(t, "tb-bad-token")
	pay := s.payStarted(t, order.GetId())
	if err := s.bank.Pay(pay); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)

	notes := s.bank.Notifications()
	if len(notes) != 2 {
		t.Fatalf("the bank made %d notifications, want AUTHORIZED and CONFIRMED", len(notes))
	}
	for _, n := range notes {
		if len(n.Attempts) != 1+retries || n.Acked() {
			t.Errorf("%s: %d attempts (acknowledged: %v), want %d, none acknowledged", n.Status, len(n.Attempts), n.Acked(), 1+retries)
		}
		for _, a := range n.Attempts {
			if a.HTTPStatus != http.StatusUnauthorized || a.Answer == "OK" {
				t.Errorf("%s: attempt answered %d %q, want 401 and not OK", n.Status, a.HTTPStatus, a.Answer)
			}
		}
	}
	s.settle(t)
	if n := s.count(t, "SELECT count(*) FROM inbox_events"); n != 0 {
		t.Errorf("%d inbox rows after wrongly signed notifications, want none", n)
	}
	// The start recorded the attempt; nothing else exists.
	want := orderCounts{State: "pending_payment", Attempts: 1}
	if got := s.orderCounts(t, order.GetId()); !got.equal(want) {
		t.Errorf("order: %v\nwant   %v", got, want)
	}

	for _, n := range notes {
		body := resign(t, n.Body, tbankPassword)
		for range 3 {
			if code, answer, err := s.deliverTBank(body); err != nil || code != http.StatusOK || answer != "OK" {
				t.Fatalf("%s signed right: %d %q %v, want 200 OK", n.Status, code, answer, err)
			}
		}
	}
	s.settle(t)
	want = paidOnce(s.authorizedDecision(t, pay))
	if got := s.orderCounts(t, order.GetId()); !got.equal(want) {
		t.Errorf("order after the right Token: %v\nwant   %v", got, want)
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events"); n != 2 {
		t.Errorf("%d inbox rows, want 2", n)
	}
}

// An amount mismatch: a payment of less than the order costs, started at
// the bank under the order's checkout session. The order goes on hold with
// one amount_mismatch item and no license, however often the CONFIRMED
// comes.
func TestTBankAmountMismatch(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{Misbehaviour: fakebank.Misbehaviour{Repeat: 2}}, nil)
	const session, paid = "cs-tb-amount", rubMinor - 1000
	order := s.createRUBOrderWith(t, rubOrder{merchantOrderID: "tb-amount", checkoutSessionID: session})
	p := s.payAtBank(t, session, paid)
	s.settle(t)
	s.acked(t, 2)
	// The bank's CONFIRMED once more, after processing.
	if code, answer, err := s.deliverTBank(s.notification(t, p.PaymentID, tbank.StatusConfirmed).Body); err != nil || code != http.StatusOK || answer != "OK" {
		t.Fatalf("CONFIRMED again: %d %q %v", code, answer, err)
	}
	s.settle(t)

	want := orderCounts{State: "on_hold", Attempts: 1, Items: map[string]int{"amount_mismatch": 1},
		Inbox:     map[string]int{s.authorizedDecision(t, p.PaymentID): 1, "amount_mismatch": 1},
		Published: map[string]int{"order.on_hold": 1}}
	if got := s.orderCounts(t, order.GetId()); !got.equal(want) {
		t.Errorf("order: %v\nwant   %v", got, want)
	}
	if n := s.count(t, `SELECT count(*) FROM reconciliation_items
		WHERE order_id = $1 AND kind = 'amount_mismatch' AND amount = $2 AND expected_amount = $3 AND currency = 'RUB'`,
		order.GetId(), paid, rubMinor); n != 1 {
		t.Errorf("no amount_mismatch item naming %d RUB kopecks received and %d expected", paid, rubMinor)
	}
}

// A refund after payment, notified twice at once and once more later: the
// order is refunded once — one refund_after_fulfillment item, one ledger
// reversal of its balance credit. (What becomes of its licenses is not
// asserted here.)
func TestTBankRefundAfterPayment(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{}, nil)
	order := s.createRUBOrderWith(t, rubOrder{merchantOrderID: "tb-refund", credit: true})
	pay := s.payStarted(t, order.GetId())
	if err := s.bank.Pay(pay); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)
	auth := s.authorizedDecision(t, pay)
	want := orderCounts{State: "fulfilled", Licenses: 1, Credits: 1, Attempts: 1,
		Inbox: map[string]int{auth: 1, "fulfilled": 1}, Published: map[string]int{"order.fulfilled": 1}}
	if got := s.orderCounts(t, order.GetId()); !got.equal(want) {
		t.Fatalf("paid order: %v\nwant   %v", got, want)
	}

	s.bank.SetMisbehaviour(fakebank.Misbehaviour{Repeat: 2})
	if err := s.bank.Cancel(pay, 0); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)
	if code, answer, err := s.deliverTBank(s.notification(t, pay, tbank.StatusRefunded).Body); err != nil || code != http.StatusOK || answer != "OK" {
		t.Fatalf("REFUNDED again: %d %q %v", code, answer, err)
	}
	s.settle(t)
	if err := s.bank.Cancel(pay, 0); err == nil {
		t.Error("the bank refunded a refunded payment")
	}

	if got := s.acked(t, 0); !equalStrings(got, tbank.StatusAuthorized, tbank.StatusConfirmed, tbank.StatusRefunded) {
		t.Errorf("notified %v", got)
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = $1", tbankEventID(pay, tbank.StatusRefunded)); n != 1 {
		t.Errorf("REFUNDED stored %d times, want once", n)
	}
	want = orderCounts{State: "refunded", Licenses: 1, Revoked: 1, Credits: 1, Reversals: 1, Attempts: 1,
		Items:     map[string]int{"refund_after_fulfillment": 1},
		Inbox:     map[string]int{auth: 1, "fulfilled": 1, "refunded": 1},
		Published: map[string]int{"order.fulfilled": 1, "order.refunded": 1}}
	got := s.orderCounts(t, order.GetId())
	if !got.equal(want) {
		t.Errorf("refunded order: %v\nwant   %v", got, want)
	}
	if sum := s.count(t, "SELECT coalesce(sum(minor_units), 0) FROM ledger_entries WHERE order_id = $1", order.GetId()); sum != 0 {
		t.Errorf("the order's ledger sums to %d, want 0 (credit and reversal)", sum)
	}
	if got := s.attemptStates(t, order.GetId()); got != "refunded" {
		t.Errorf("payment attempts: %s, want one refunded", got)
	}
}

// Partial refunds, each notified twice at once (and once more later): each
// is recorded once, with one refund_after_fulfillment item, and takes back
// its share of the balance credit once; the order stays fulfilled, its
// license in force, until the rest is refunded, which reverses what is
// left of the credit and revokes the license.
func TestTBankPartialRefund(t *testing.T) {
	t.Parallel()
	s := startTBank(t, fakebank.Options{}, nil)
	order := s.createRUBOrderWith(t, rubOrder{merchantOrderID: "tb-partial", credit: true})
	pay := s.payStarted(t, order.GetId())
	if err := s.bank.Pay(pay); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	s.settle(t)
	auth := s.authorizedDecision(t, pay)

	s.bank.SetMisbehaviour(fakebank.Misbehaviour{Repeat: 2})
	refund := func(amount int64) []byte {
		t.Helper()
		if err := s.bank.Cancel(pay, amount); err != nil {
			t.Fatal(err)
		}
		s.waitBank(t)
		s.settle(t)
		notes := s.bank.Notifications()
		body := notes[len(notes)-1].Body
		if code, answer, err := s.deliverTBank(body); err != nil || code != http.StatusOK || answer != "OK" {
			t.Fatalf("the refund again: %d %q %v", code, answer, err)
		}
		s.settle(t)
		return body
	}

	refund(5000)
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = $1", tbankEventID(pay, tbank.StatusPartialRefunded)+":5000"); n != 1 {
		t.Errorf("PARTIAL_REFUNDED of 5000 stored %d times, want once", n)
	}
	want := orderCounts{State: "fulfilled", Licenses: 1, Credits: 1, Partials: 1, Attempts: 1,
		Items:     map[string]int{"refund_after_fulfillment": 1},
		Inbox:     map[string]int{auth: 1, "fulfilled": 1, "partially_refunded": 1},
		Published: map[string]int{"order.fulfilled": 1}}
	got := s.orderCounts(t, order.GetId())
	if !got.equal(want) {
		t.Errorf("after a partial refund: %v\nwant   %v", got, want)
	}

	// Another partial refund, of another amount: another item.
	refund(3000)
	want.Items["refund_after_fulfillment"], want.Inbox["partially_refunded"], want.Partials = 2, 2, 2
	got = s.orderCounts(t, order.GetId())
	if !got.equal(want) {
		t.Errorf("after a second partial refund: %v\nwant   %v", got, want)
	}

	// The rest: the order is refunded, its credit reversed once.
	refund(0)
	want.State, want.Reversals, want.Revoked = "refunded", 1, 1
	want.Items["refund_after_fulfillment"], want.Inbox["refunded"] = 3, 1
	want.Published["order.refunded"] = 1
	got = s.orderCounts(t, order.GetId())
	if !got.equal(want) {
		t.Errorf("after refunding the rest: %v\nwant   %v", got, want)
	}
	// The shares: credit × refunded ÷ total, rounded down; the rest on
	// the full refund.
	credit := s.count(t, "SELECT minor_units FROM ledger_entries WHERE order_id = $1 AND movement = 'credit'", order.GetId())
	total := s.count(t, "SELECT total_minor_units FROM orders WHERE id = $1", order.GetId())
	shares := s.count(t, "SELECT -sum(minor_units) FROM ledger_entries WHERE order_id = $1 AND movement = 'partial_reversal'", order.GetId())
	if want := credit*5000/total + credit*3000/total; shares != want {
		t.Errorf("partial reversals take back %d, want %d of the %d credit", shares, want, credit)
	}
	if sum := s.count(t, "SELECT coalesce(sum(minor_units), 0) FROM ledger_entries WHERE order_id = $1", order.GetId()); sum != 0 {
		t.Errorf("the order's ledger sums to %d, want 0", sum)
	}
	if got := s.acked(t, 0); !equalStrings(got, tbank.StatusAuthorized, tbank.StatusConfirmed,
		tbank.StatusPartialRefunded, tbank.StatusPartialRefunded, tbank.StatusRefunded) {
		t.Errorf("notified %v", got)
	}
}

// PaymentId written as a string or as a number: the same behaviour, and
// the same dedup key — the other spelling of a notification already stored
// is a duplicate, not a second event.
func TestTBankPaymentIDSpellings(t *testing.T) {
	t.Parallel()
	for _, asString := range []bool{false, true} {
		t.Run(fmt.Sprintf("as string %v", asString), func(t *testing.T) {
			t.Parallel()
			s := startTBank(t, fakebank.Options{PaymentIDAsString: asString}, nil)
			order := s.createRUBOrder(t, "tb-spelling")
			pay := s.payStarted(t, order.GetId())
			if err := s.bank.Pay(pay); err != nil {
				t.Fatal(err)
			}
			s.waitBank(t)
			s.settle(t)
			s.acked(t, 1)

			// The other spelling of each notification. The Token signs the
			// digits either way, so the bank's Token still holds.
			for _, status := range []string{tbank.StatusAuthorized, tbank.StatusConfirmed} {
				body := s.notification(t, pay, status).Body
				spelled := fmt.Sprintf(`"PaymentId":%s`, pay)
				if asString {
					spelled = fmt.Sprintf(`"PaymentId":%q`, pay)
				}
				if !bytes.Contains(body, []byte(spelled)) {
					t.Fatalf("the bank's %s does not spell %s", status, spelled)
				}
				other := withPaymentID(t, body, !asString)
				if code, answer, err := s.deliverTBank(other); err != nil || code != http.StatusOK || answer != "OK" {
					t.Fatalf("%s with the PaymentId respelled: %d %q %v, want 200 OK", status, code, answer, err)
				}
				if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = $1", tbankEventID(pay, status)); n != 1 {
					t.Errorf("%s: %d inbox rows for both spellings, want 1", status, n)
				}
			}
			s.settle(t)
			want := paidOnce(s.authorizedDecision(t, pay))
			if got := s.orderCounts(t, order.GetId()); !got.equal(want) {
				t.Errorf("order: %v\nwant   %v", got, want)
			}
			if n := s.count(t, "SELECT count(*) FROM inbox_events"); n != 2 {
				t.Errorf("%d inbox rows, want 2", n)
			}
			var ref string
			if err := s.db.QueryRow(context.Background(), "SELECT paid_payment_id FROM orders WHERE id = $1", order.GetId()).Scan(&ref); err != nil || ref != pay {
				t.Errorf("the order was paid by %q (%v), want %s", ref, err, pay)
			}
		})
	}
}

// tbankEventID is the inbox event id of the notification of status about
// payment paymentID: TerminalKey:PaymentId:Status.
func tbankEventID(paymentID, status string) string {
	return tbankTerminal + ":" + paymentID + ":" + status
}

// payStarted starts the payment of order through tbankFail and returns its
// PaymentId.
func (s *tbankStack) payStarted(t *testing.T, orderID string) string {
	t.Helper()
	p, err := s.startPayment(orderID, tbankFail, false)
	if err != nil || p.GetState() != "started" || p.GetPaymentId() == "" {
		t.Fatalf("start = %v, %v; want started", p, err)
	}
	return p.GetPaymentId()
}

// payAtBank starts a payment of amount kopecks at the bank itself, under
// the bank order id orderID (as a merchant's own checkout does, not
// StartPayment), pays it, and waits until the bank has notified it.
func (s *tbankStack) payAtBank(t *testing.T, orderID string, amount int64) tbank.Payment {
	t.Helper()
	client, err := tbank.NewClient(s.bank.URL(), tbankTerminal, [][]byte{[]byte(tbankPassword)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := client.Init(context.Background(), tbank.InitRequest{OrderID: orderID, Amount: amount})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.bank.Pay(p.PaymentID); err != nil {
		t.Fatal(err)
	}
	s.waitBank(t)
	return p
}

// rubOrder is an order createRUBOrderWith creates.
type rubOrder struct {
	merchantOrderID, checkoutSessionID string
	// credit adds a balance credit line of 5 RUB.
	credit bool
}

// createRUBOrderWith creates a live order of org_a: one license at 192 RUB,
// and a balance credit when req says so.
func (s *tbankStack) createRUBOrderWith(t *testing.T, req rubOrder) *fulfillmentv1.Order {
	t.Helper()
	lines := []*fulfillmentv1.OrderLine{
		{Sku: defaultSKU, Kind: "license", Quantity: 1, UnitPrice: &fulfillmentv1.Money{Currency: "RUB", MinorUnits: rubMinor}},
	}
	if req.credit {
		lines = append(lines, &fulfillmentv1.OrderLine{Sku: creditSKU, Kind: "balance_credit", Quantity: 1,
			UnitPrice: &fulfillmentv1.Money{Currency: "RUB", MinorUnits: creditMinor}, AccountRef: "acct_" + req.merchantOrderID})
	}
	resp, err := s.client.CreateOrder(authed(orgAToken), &fulfillmentv1.CreateOrderRequest{
		OrgId: orgA, Environment: "live", MerchantOrderId: req.merchantOrderID, CheckoutSessionId: req.checkoutSessionID, Lines: lines,
	})
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	return resp.GetOrder()
}

// deliverTBank posts a notification body to tbankFail's webhook as the
// bank does, and returns the answer. It may be called from any goroutine.
func (s *stack) deliverTBank(body []byte) (status int, answer string, err error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, s.ingestURL+"/webhooks/"+tbankFail, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return resp.StatusCode, string(b), err
}

// notification returns the bank's one notification of status about
// payment paymentID.
func (s *tbankStack) notification(t *testing.T, paymentID, status string) fakebank.Notification {
	t.Helper()
	var found []fakebank.Notification
	for _, n := range s.bank.Notifications() {
		if n.PaymentID == paymentID && n.Status == status {
			found = append(found, n)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the bank made %d notifications of %s about payment %s, want 1", len(found), status, paymentID)
	}
	return found[0]
}

// acked checks that every copy of every notification the bank made was
// answered exactly OK at its first attempt (a duplicate is acknowledged
// like the original), each sent copies times (0: any number of times), and
// returns their statuses in the order made.
func (s *tbankStack) acked(t *testing.T, copies int) []string {
	t.Helper()
	var statuses []string
	for _, n := range s.bank.Notifications() {
		statuses = append(statuses, n.Status)
		if copies > 0 && n.Copies != copies {
			t.Errorf("%s of payment %s sent %d times at once, want %d", n.Status, n.PaymentID, n.Copies, copies)
		}
		if len(n.Attempts) != n.Copies {
			t.Errorf("%s of payment %s: %d attempts for %d copies, want one each: %+v", n.Status, n.PaymentID, len(n.Attempts), n.Copies, n.Attempts)
		}
		for _, a := range n.Attempts {
			if !a.OK {
				t.Errorf("%s of payment %s, copy %d: answered %d %q (%s), want 200 OK", n.Status, n.PaymentID, a.Copy, a.HTTPStatus, a.Answer, a.Err)
			}
		}
	}
	return statuses
}

// authorizedDecision returns the decision of the AUTHORIZED of payment
// paymentID, which must be one of the two it may have: recorded, or stale
// when its order's CONFIRMED was decided first. (The bank sends CONFIRMED
// once AUTHORIZED is stored, but the two may be claimed by two workers.)
func (s *tbankStack) authorizedDecision(t *testing.T, paymentID string) string {
	t.Helper()
	r := inboxEvent(t, s.stack, tbankEventID(paymentID, tbank.StatusAuthorized))
	if r.State != "processed" || (r.Decision != "attempt_recorded" && r.Decision != "stale_ignored") {
		t.Errorf("AUTHORIZED of %s: %v; want processed, its attempt recorded or stale", paymentID, r)
	}
	return r.Decision
}

// decisionsByArrival lists the order's events as type=decision, in the
// order they were stored.
func (s *stack) decisionsByArrival(t *testing.T, orderID string) string {
	t.Helper()
	rows, err := s.db.Query(context.Background(),
		"SELECT event_type || '=' || coalesce(decision, state) FROM inbox_events WHERE order_id = $1 ORDER BY id", orderID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ds []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	return strings.Join(ds, ",")
}

// attemptStates lists the states of the order's payment attempts.
func (s *stack) attemptStates(t *testing.T, orderID string) string {
	t.Helper()
	rows, err := s.db.Query(context.Background(), "SELECT state FROM payment_attempts WHERE order_id = $1 ORDER BY id", orderID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var states []string
	for rows.Next() {
		var st string
		if err := rows.Scan(&st); err != nil {
			t.Fatal(err)
		}
		states = append(states, st)
	}
	return strings.Join(states, ",")
}

// orderCounts is what an order got, counted straight from the tables.
type orderCounts struct {
	State    string
	Licenses int
	// Revoked counts the licenses a refund revoked (they stay listed).
	Revoked int
	// Credits, Reversals and Partials are ledger rows, by movement
	// (credit, refund_reversal, partial_reversal).
	Credits, Reversals, Partials int
	Attempts                     int
	// Items are reconciliation items by kind, Inbox the order's inbox rows
	// by decision, Published its order events by topic.
	Items, Inbox, Published map[string]int
}

// paidOnce is what a T-Bank order paid once holds: fulfilled, one license,
// one attempt, its AUTHORIZED decided auth and its CONFIRMED fulfilled, one
// order.fulfilled.
func paidOnce(auth string) orderCounts {
	return orderCounts{State: "fulfilled", Licenses: 1, Attempts: 1,
		Inbox:     map[string]int{auth: 1, "fulfilled": 1},
		Published: map[string]int{"order.fulfilled": 1}}
}

func (s *stack) orderCounts(t *testing.T, orderID string) orderCounts {
	t.Helper()
	c := orderCounts{
		Licenses:  s.count(t, "SELECT count(*) FROM entitlements WHERE order_id = $1", orderID),
		Credits:   s.count(t, "SELECT count(*) FROM ledger_entries WHERE order_id = $1 AND movement = 'credit'", orderID),
		Reversals: s.count(t, "SELECT count(*) FROM ledger_entries WHERE order_id = $1 AND movement = 'refund_reversal'", orderID),
		Partials:  s.count(t, "SELECT count(*) FROM ledger_entries WHERE order_id = $1 AND movement = 'partial_reversal'", orderID),
		Revoked:   s.count(t, "SELECT count(*) FROM entitlements WHERE order_id = $1 AND revoked_at IS NOT NULL", orderID),
		Attempts:  s.count(t, "SELECT count(*) FROM payment_attempts WHERE order_id = $1", orderID),
		Items:     s.countBy(t, "SELECT kind, count(*) FROM reconciliation_items WHERE order_id = $1 GROUP BY kind", orderID),
		Inbox:     s.countBy(t, "SELECT coalesce(decision, state), count(*) FROM inbox_events WHERE order_id = $1 GROUP BY 1", orderID),
		Published: s.countBy(t, "SELECT topic, count(*) FROM order_events WHERE order_id = $1 GROUP BY topic", orderID),
	}
	if err := s.db.QueryRow(context.Background(), "SELECT state FROM orders WHERE id = $1", orderID).Scan(&c.State); err != nil {
		t.Fatal(err)
	}
	return c
}

// countBy runs a query of (key, count) rows.
func (s *stack) countBy(t *testing.T, query string, args ...any) map[string]int {
	t.Helper()
	rows, err := s.db.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		m[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return m
}

// equal compares two counts; a nil map equals an empty one.
func (c orderCounts) equal(o orderCounts) bool {
	return c.State == o.State && c.Licenses == o.Licenses && c.Revoked == o.Revoked && c.Credits == o.Credits &&
		c.Reversals == o.Reversals && c.Partials == o.Partials &&
		c.Attempts == o.Attempts && maps.Equal(c.Items, o.Items) && maps.Equal(c.Inbox, o.Inbox) && maps.Equal(c.Published, o.Published)
}

func (c orderCounts) String() string {
	return fmt.Sprintf("state=%s licenses=%d revoked=%d credits=%d reversals=%d partials=%d attempts=%d items=%v inbox=%v published=%v",
		c.State, c.Licenses, c.Revoked, c.Credits, c.Reversals, c.Partials, c.Attempts, c.Items, c.Inbox, c.Published)
}

func equalStrings(got []string, want ...string) bool {
	return strings.Join(got, ",") == strings.Join(want, ",")
}

// members reads a notification body member by member, each kept as written.
func members(t *testing.T, body []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("a notification body: %v", err)
	}
	return m
}

func marshal(t *testing.T, m map[string]json.RawMessage) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// resign returns the notification body with its Token made with password.
func resign(t *testing.T, body []byte, password string) []byte {
	t.Helper()
	m := members(t, body)
	delete(m, "Token")
	token, err := tbank.Token(marshal(t, m), []byte(password))
	if err != nil {
		t.Fatal(err)
	}
	m["Token"] = json.RawMessage(strconv.Quote(token))
	return marshal(t, m)
}

// withPaymentID returns the notification body with its PaymentId written
// as a string of digits or as a number, and nothing else changed.
func withPaymentID(t *testing.T, body []byte, asString bool) []byte {
	t.Helper()
	m := members(t, body)
	digits := strings.Trim(string(m["PaymentId"]), `"`)
	if asString {
		m["PaymentId"] = json.RawMessage(strconv.Quote(digits))
	} else {
		m["PaymentId"] = json.RawMessage(digits)
	}
	return marshal(t, m)
}
