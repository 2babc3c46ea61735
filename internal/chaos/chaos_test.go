package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/fakebank"
)

const testTBankPassword = "chaos-terminal-password"

func plan(seed int64, orders, events int, window time.Duration) *workload {
	w := newWorkload(seed, orders, []byte(testTBankPassword))
	w.planEvents(events, window, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	return w
}

func TestWorkloadDeterministic(t *testing.T) {
	t.Parallel()
	a, b := plan(42, 200, 2000, 20*time.Second), plan(42, 200, 2000, 20*time.Second)
	if len(a.events) != len(b.events) || len(a.deliveries) != len(b.deliveries) {
		t.Fatalf("same seed, different workloads: %d/%d events, %d/%d deliveries", len(a.events), len(b.events), len(a.deliveries), len(b.deliveries))
	}
	for i := range a.events {
		if !bytes.Equal(a.events[i].body, b.events[i].body) || a.events[i].at != b.events[i].at {
			t.Fatalf("event %d differs under the same seed", i)
		}
	}
	if c := plan(43, 200, 2000, 20*time.Second); bytes.Equal(c.events[0].body, a.events[0].body) {
		t.Fatalf("another seed gave the same first event")
	}
}

func TestWorkloadShape(t *testing.T) {
	t.Parallel()
	const orders, events, window = 300, 3000, 30 * time.Second
	w := plan(7, orders, events, window)
	st := w.stats
	if st.Orders != orders || st.Events < events || st.Events != len(w.events) {
		t.Fatalf("stats %+v, want %d orders and at least %d events", st, orders, events)
	}
	if ratio := float64(st.Redeliveries) / float64(st.Events); ratio < 0.15 || ratio > 0.3 {
		t.Errorf("redeliveries %d of %d events (%.2f), want about 20%%", st.Redeliveries, st.Events, ratio)
	}
	if st.Concurrent == 0 || st.TestOnlyOrders == 0 || st.ExtraPayments == 0 || st.StaleEvents == 0 || st.TestModeEvents == 0 {
		t.Errorf("missing ingredients: %+v", st)
	}
	for i := 1; i < len(w.deliveries); i++ {
		if w.deliveries[i].at < w.deliveries[i-1].at || w.deliveries[i].at > window {
			t.Fatalf("delivery %d at %v: not sorted or past the window", i, w.deliveries[i].at)
		}
	}

	ids := map[string]bool{}
	confirmAt := map[int]time.Duration{}
	for _, e := range w.events {
		if ids[e.id] {
			t.Fatalf("event id %s planned twice", e.id)
		}
		ids[e.id] = true
		if e.endpoint == tbankEP {
			continue // TestTBankNotifications
		}
		var p yolfi.Payload
		if err := json.Unmarshal(e.body, &p); err != nil {
			t.Fatal(err)
		}
		test := (p.Livemode != nil && !*p.Livemode) || strings.HasPrefix(p.ID, yolfi.TestEventIDPrefix)
		if test != e.testMode || p.ID != e.id || p.Type != e.typ || p.OrgID != orgID {
			t.Fatalf("event %s: payload %+v does not match its plan %+v", e.id, p, e)
		}
		o := w.orders[e.order]
		if o.testOnly != e.testMode {
			t.Fatalf("event %s (test mode %v) for order %s (test-only %v)", e.id, e.testMode, o.mid, o.testOnly)
		}
		if e.role == rolePay && e.typ == yolfi.TypePaymentConfirmed {
			if _, dup := confirmAt[e.order]; dup {
				t.Fatalf("order %s has two paying confirmations", o.mid)
			}
			confirmAt[e.order] = e.at
		}
	}
	for _, e := range w.events {
		if e.role == roleStale && e.at <= confirmAt[e.order] {
			t.Fatalf("stale event %s at %v is not after its confirmation at %v", e.id, e.at, confirmAt[e.order])
		}
	}
	kinds := map[string]int{}
	for _, o := range w.orders {
		kinds[strings.Join(o.external, "+")]++
		lines := o.request().GetLines()
		for _, l := range o.externalLines() {
			if got := lines[l.no]; got.GetKind() != "external" || got.GetDestination() != l.dest {
				t.Fatalf("order %s: line %d is %s to %q, want external to %s", o.mid, l.no, got.GetKind(), got.GetDestination(), l.dest)
			}
		}
	}
	if len(kinds) != 4 || st.ExternalLines != kinds[destIdempotent]+kinds[destPlain]+2*kinds[destIdempotent+"+"+destPlain] {
		t.Errorf("external lines by order: %v; %d lines counted", kinds, st.ExternalLines)
	}
	for i, o := range w.orders {
		if _, ok := confirmAt[i]; ok == (o.testOnly || o.tbank) {
			t.Fatalf("order %s: test-only %v, paying confirmation planned %v", o.mid, o.testOnly, ok)
		}
	}
}

func TestFinalAttemptState(t *testing.T) {
	t.Parallel()
	c, o, x, p := yolfi.TypeInvoiceCreated, yolfi.TypeInvoiceOverdue, yolfi.TypeInvoiceCancelled, yolfi.TypePaymentConfirmed
	for _, tc := range []struct {
		events []string
		want   string
	}{
		{[]string{c}, "created"},
		{[]string{c, o}, "expired"},
		{[]string{o, c}, "expired"},
		{[]string{x, c}, "cancelled"},
		{[]string{c, p, o}, "confirmed"},
		{[]string{o, p}, "confirmed"},
		{[]string{p, c, x}, "confirmed"},
		{[]string{yolfi.TypeSubscriptionOverdue}, ""},
	} {
		got := ""
		for _, typ := range tc.events {
			got = finalAttemptState(got, typ)
		}
		if got != tc.want {
			t.Errorf("%v: %q, want %q", tc.events, got, tc.want)
		}
	}
}

func TestPlanFaults(t *testing.T) {
	t.Parallel()
	const window = 100 * time.Second
	fs := planFaults(1, window, 20, 2)
	kills, pg := 0, 0
	for i, f := range fs {
		if f.at < window/20 || f.at > window || (i > 0 && f.at < fs[i-1].at) {
			t.Fatalf("fault %d at %v: out of the window or order", i, f.at)
		}
		if f.kind == faultKill {
			kills++
		} else {
			pg++
		}
	}
	if kills != 20 || pg != 2 {
		t.Fatalf("%d kills and %d PostgreSQL stops, want 20 and 2", kills, pg)
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	r := Report{Acked: 20003, Destinations: []DestinationReport{
		{ID: destIdempotent, Delivered: 2400},
		{ID: destPlain, Delivered: 390, Uncertain: 7, UncertainReached: 4},
	}}
	want := "chaos: 20003 acked, 0 lost, 0 duplicated effects; outbox: 2790 delivered once, 0 doubled, 7 uncertain (all with items)"
	if got := r.Summary(); got != want || !r.OK() {
		t.Fatalf("Summary() = %q (OK %v), want %q", got, r.OK(), want)
	}
	r.Destinations[0].Failed, r.Destinations[1].Doubled, r.Unitemized = 2, 1, 3
	r.Violations = []string{"outbox delivery: …"}
	want = "chaos: 20003 acked, 0 lost, 0 duplicated effects; outbox: 2790 delivered once, 1 doubled, 7 uncertain, 2 failed (3 without their item); FAILED"
	if got := r.Summary(); !strings.HasPrefix(got, want) || r.OK() {
		t.Fatalf("Summary() = %q (OK %v), want it to start with %q", got, r.OK(), want)
	}
	v := newViolations()
	for i := range examplesPerCategory + 2 {
		v.add("lost", "event %d", i)
	}
	r = Report{Acked: 5, Lost: 10, Violations: v.list()}
	s := r.Summary()
	if r.OK() || !strings.HasPrefix(s, "chaos: 5 acked, 10 lost, 0 duplicated effects; outbox: 0 delivered once, 0 doubled, 0 uncertain (all with items); FAILED") || !strings.Contains(s, "and 2 more") {
		t.Fatalf("Summary() = %q", s)
	}
	r = Report{Acked: 12, TBank: TBankReport{Notifications: 4, Acked: 4}}
	if got, want := r.Summary(), "chaos: 12 acked, 0 lost, 0 duplicated effects; outbox: 0 delivered once, 0 doubled, 0 uncertain (all with items); tbank: 4 acked, 0 lost, 0 duplicated"; got != want {
		t.Fatalf("Summary() = %q, want %q", got, want)
	}
	r = Report{Incomplete: "context canceled"}
	if r.OK() || !strings.Contains(r.Summary(), "NOT COMPLETED") {
		t.Fatalf("an incomplete run summarized as %q", r.Summary())
	}
}

// The checker's model of confirmations agrees with the state machine for
// every pair of paying and later confirmation, identified or not.
func TestConfirmedDecisionMatchesStateMachine(t *testing.T) {
	t.Parallel()
	settlement := &fulfillment.Settlement{Token: payToken, Network: payNetwork, Amount: decimal.RequireFromString(payAmount)}
	confirmations := []*eventPlan{
		{invoice: "inv_1", payment: "pay_1"},
		{invoice: "inv_2", payment: "pay_2"},
		{invoice: "inv_1", payment: "pay_9"},
		{invoice: "inv_1"},
		{invoice: "inv_2"},
		{payment: "pay_1"},
		{payment: "pay_2"},
		{}, // only the merchant order id: identifies no payment
	}
	refs := func(e *eventPlan) string {
		if e == nil {
			return "nothing"
		}
		return fmt.Sprintf("invoice %q payment %q", e.invoice, e.payment)
	}
	info := func(e *eventPlan) fulfillment.PaymentInfo {
		// As the Yolfi adapter normalizes it: the attempt is the invoice,
		// else the payment.
		return fulfillment.PaymentInfo{AttemptRef: e.attemptRef(), InvoiceID: e.invoice, PaymentID: e.payment,
			MerchantOrderID: "m", Amount: fulfillment.TokenAmount(settlement.Amount, payToken, payNetwork)}
	}
	for _, payer := range append([]*eventPlan{nil}, confirmations...) {
		order := fulfillment.PaidOrder{State: fulfillment.StatePendingPayment, Settlement: settlement}
		if payer != nil {
			order.State, order.Paid = fulfillment.StateFulfilled, true
			order.PaidBy = info(payer).PaidRefs()
		}
		for _, e := range confirmations {
			ev := fulfillment.ProviderEvent{Environment: fulfillment.EnvLive, Kind: fulfillment.EventPaymentConfirmed,
				Type: yolfi.TypePaymentConfirmed, Payment: info(e)}
			want := string(fulfillment.Decide(ev, &order).Decision)
			if got := confirmedDecision(payer, e); got != want {
				t.Errorf("paid by %s, confirmation %s: model %s, state machine %s", refs(payer), refs(e), got, want)
			}
		}
	}
}

// Each receiver misbehaves at about its configured rates, whatever the keys
// look like (they differ in their last characters only).
func TestReceiverFaultRates(t *testing.T) {
	t.Parallel()
	const n = 10000
	for _, d := range newDestinations() {
		plan := d.plan(11)
		for i := range n {
			plan(fmt.Sprintf("order_%08d_line_1_fulfill", i/2), 1+i%2)
		}
		f := d.faults
		for _, c := range []struct {
			name string
			got  int64
			rate float64
		}{
			{"refused", d.refused.Load(), f.refuse}, {"hung before", d.hungBefore.Load(), f.hangBefore},
			{"hung after", d.hungAfter.Load(), f.hangAfter}, {"dropped", d.dropped.Load(), f.drop},
		} {
			if want := c.rate * n; float64(c.got) < 0.7*want || float64(c.got) > 1.3*want {
				t.Errorf("%s: %s %d of %d requests, want about %.0f", d.id, c.name, c.got, n, want)
			}
		}
	}
}

// T-Bank notifications are signed, parse to their planned id in both
// spellings of PaymentId, and come in the planned variety: AUTHORIZED after
// CONFIRMED, refunds of distinct amounts after their confirmation, each
// delivered twice at least.
func TestTBankNotifications(t *testing.T) {
	t.Parallel()
	w := plan(7, 400, 4000, 30*time.Second)
	st := w.stats.TBank
	if st.Orders < 60 || st.Orders > 140 || st.PartialRefunds == 0 || st.FullRefunds == 0 {
		t.Fatalf("T-Bank share %+v of 400 orders, want about a quarter, with refunds", st)
	}
	deliveries, alts := map[int]int{}, 0
	for _, d := range w.deliveries {
		deliveries[d.ev]++
		alts += btoi(d.alt)
	}
	confirmed, authorizedLate := map[int]time.Duration{}, 0
	amounts := map[int]map[int64]bool{}
	n := 0
	for j, e := range w.events {
		if e.endpoint != tbankEP {
			continue
		}
		n++
		for _, body := range [][]byte{e.body, e.alt} {
			if err := tbank.Verify(body, [][]byte{[]byte(testTBankPassword)}); err != nil {
				t.Fatalf("%s: %v", e.id, err)
			}
			ev, err := tbank.Parse(tbankEndpoint, tbankTerminal, body)
			if err != nil || ev.EventID != e.id || ev.Payment.CheckoutSessionID != w.orders[e.order].session() {
				t.Fatalf("%s parses to %q (session %q): %v", e.id, ev.EventID, ev.Payment.CheckoutSessionID, err)
			}
		}
		if bytes.Equal(e.body, e.alt) || bytes.Contains(e.body, []byte(`"PaymentId":"`)) == bytes.Contains(e.alt, []byte(`"PaymentId":"`)) {
			t.Fatalf("%s: both bodies spell PaymentId alike", e.id)
		}
		switch e.typ {
		case tbank.StatusConfirmed:
			confirmed[e.order] = e.at
		case tbank.StatusPartialRefunded:
			if amounts[e.order] == nil {
				amounts[e.order] = map[int64]bool{}
			}
			if amounts[e.order][e.amount] {
				t.Fatalf("%s: a second partial refund of %d", e.id, e.amount)
			}
			amounts[e.order][e.amount] = true
		}
		if e.role == roleRefund && deliveries[j] < 2 {
			t.Fatalf("refund %s delivered %d times, want 2 at least", e.id, deliveries[j])
		}
	}
	for _, e := range w.events {
		switch {
		case e.endpoint != tbankEP:
		case e.role == roleRefund && e.at < confirmed[e.order]:
			t.Fatalf("refund %s at %v before its confirmation at %v", e.id, e.at, confirmed[e.order])
		case e.typ == tbank.StatusAuthorized && e.at > confirmed[e.order]:
			authorizedLate++
		}
	}
	if n != st.Notifications || len(confirmed) != st.Orders || authorizedLate == 0 || alts == 0 {
		t.Fatalf("%d notifications (stats %d), %d confirmed orders (stats %d), %d AUTHORIZED after CONFIRMED, %d deliveries of the other spelling",
			n, st.Notifications, len(confirmed), st.Orders, authorizedLate, alts)
	}
}

// The replay of a T-Bank order: partial refunds take back the credit's
// share (rounded down) once each, the full refund the rest and the
// licenses, each refund one item; a refund applied before the confirmation
// leaves the order unpaid.
func TestTBankReplay(t *testing.T) {
	t.Parallel()
	o := &orderPlan{mid: "m-1", licenseQty: 1, credit: true, tbank: true} // 19900 + 50000 kopecks
	notice := func(status string, amount int64) fulfillment.ProviderEvent {
		body := fakebank.NoticeBody(fakebank.NoticeFields{TerminalKey: tbankTerminal, OrderID: o.session(), PaymentID: "42",
			Status: status, Amount: amount}, []byte(testTBankPassword))
		ev, err := tbank.Parse(tbankEndpoint, tbankTerminal, body)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	rp := newReplay(o, "order-1")
	var decisions []fulfillment.Decision
	for _, ev := range []fulfillment.ProviderEvent{
		notice(tbank.StatusConfirmed, 69900), notice(tbank.StatusAuthorized, 69900),
		notice(tbank.StatusPartialRefunded, 6990), notice(tbank.StatusPartialRefunded, 7),
		notice(tbank.StatusRefunded, 62903), notice(tbank.StatusPartialRefunded, 100),
	} {
		decisions = append(decisions, rp.apply(ev))
	}
	want := "[fulfilled stale_ignored partially_refunded partially_refunded refunded partially_refunded]"
	if fmt.Sprint(decisions) != want {
		t.Errorf("decisions %v, want %s", decisions, want)
	}
	// 6990 of 69900 is a tenth of the credit; 7 of it 5.007…, rounded down.
	ledger := fmt.Sprint(rp.ledger)
	// A partial refund is named by its payment and amount (RefundRef).
	if want := "[line 1 credit 50000 line 1 partial_reversal -5000 for tbank:42:6990 RUB " +
		"line 1 partial_reversal -5 for tbank:42:7 RUB line 1 refund_reversal -44995]"; ledger != want {
		t.Errorf("ledger %s, want %s", ledger, want)
	}
	if !rp.granted || !rp.revoked || !rp.announced || rp.order.State != fulfillment.StateRefunded || len(rp.items) != 4 || sum(rp.items) != 4 {
		t.Errorf("granted %v, revoked %v, announced %v, state %s, items %v", rp.granted, rp.revoked, rp.announced, rp.order.State, rp.items)
	}

	rp = newReplay(o, "order-2")
	decisions = nil
	for _, ev := range []fulfillment.ProviderEvent{notice(tbank.StatusRefunded, 69900), notice(tbank.StatusConfirmed, 69900)} {
		decisions = append(decisions, rp.apply(ev))
	}
	if fmt.Sprint(decisions) != "[refunded_before_payment stale_ignored]" || rp.granted || len(rp.ledger) > 0 ||
		rp.order.State != fulfillment.StatePendingPayment || len(rp.items) > 0 {
		t.Errorf("refund first: decisions %v, granted %v, ledger %v, state %s, items %v", decisions, rp.granted, rp.ledger, rp.order.State, rp.items)
	}
}
