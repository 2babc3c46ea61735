package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
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
		if _, ok := confirmAt[i]; ok == (o.testOnly || o.tbank || o.sub != nil && (o.sub.tbank || o.lateFirstSub())) {
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
	r.Overpaid = OverpaymentReport{Orders: 3, Refunds: 7, Recorded: 5, NothingBack: 2}
	if got, want := r.Summary(), "chaos: 12 acked, 0 lost, 0 duplicated effects; outbox: 0 delivered once, 0 doubled, 0 uncertain (all with items); tbank: 4 acked, 0 lost, 0 duplicated; overpaid: 3 orders, 7 refunds (5 recorded, 2 of the excess only), 0 lost, 0 duplicated"; got != want {
		t.Fatalf("Summary() = %q, want %q", got, want)
	}
	r = Report{Acked: 12, Subscriptions: SubscriptionReport{Events: 5, Acked: 5, Lost: 1, Duplicated: 2}}
	if got, want := r.Summary(), "chaos: 12 acked, 0 lost, 0 duplicated effects; outbox: 0 delivered once, 0 doubled, 0 uncertain (all with items); subscriptions: 5 acked, 1 lost, 2 duplicated"; got != want {
		t.Fatalf("Summary() = %q, want %q", got, want)
	}
	r.Subscriptions.NamingOrder, r.Subscriptions.NamingRenewed, r.Subscriptions.NamingExtra = 4, 3, 1
	if got, want := r.Summary(), "chaos: 12 acked, 0 lost, 0 duplicated effects; outbox: 0 delivered once, 0 doubled, 0 uncertain (all with items); subscriptions: 5 acked, 1 lost, 2 duplicated (4 renewal payments naming their order: 3 renewed, 1 duplicate_payment, 0 already_applied)"; got != want {
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
		if e.endpoint != tbankEP || w.orders[e.order].sub != nil {
			continue // charged subscriptions: TestChargeWorkload
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
		case e.endpoint != tbankEP || w.orders[e.order].sub != nil:
		case e.role == roleRefund && e.at < confirmed[e.order] && !e.early: // an overpaid order's: TestOverpaidWorkload
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
// licenses, each refund one item (a partial one after the full one cannot
// apply: a refund_not_applicable item); a refund applied before the confirmation
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
	// The partial refund after the full one cannot apply: its own decision
	// and item, no ledger movement.
	want := "[fulfilled stale_ignored partially_refunded partially_refunded refunded refund_not_applicable]"
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
	if !rp.granted || !rp.revoked || !rp.announced || rp.order.State != fulfillment.StateRefunded || len(rp.items) != 4 || sum(rp.items) != 4 ||
		rp.items["refund_not_applicable|"+notice(tbank.StatusPartialRefunded, 100).EventID] != 1 {
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

// Subscription orders are about one Yolfi order in eight, each with a
// story of every kind; their events parse to the subscription they name,
// renewals wait for the first payment and are delivered twice at least,
// and every date is one the service believes. Above all, whatever order
// the events are processed in (within what the gates allow), no access
// runs out while an event for the subscription rules is still to come —
// so the sweeper has no choice of moment — and exactly the subscriptions
// meant to lapse have no access left at the check.
func TestSubscriptionWorkload(t *testing.T) {
	t.Parallel()
	const window = 30 * time.Second
	w := plan(7, 800, 8000, window)
	base := w.g.base
	st := w.stats.Subscriptions
	yolfiOrders, stories := 0, map[subStory]int{}
	for _, o := range w.orders {
		if !o.testOnly && !o.tbank {
			yolfiOrders++
		}
		if o.sub != nil && !o.sub.tbank && !o.lateFirstSub() { // charged subscriptions: TestChargeWorkload; paid before their order: TestLateFirstWorkload
			stories[o.sub.story]++
			if l := o.request().GetLines(); len(l) != 1 || l[0].GetKind() != "subscription" || l[0].GetPlanId() != o.sub.cfg.ID || l[0].GetAccountRef() != o.sub.customer {
				t.Fatalf("order %s: lines %v", o.mid, l)
			}
		}
	}
	if st.Orders < yolfiOrders/12 || st.Orders > yolfiOrders/5 || len(stories) != 3 || st.Lapsing != stories[storyCancelled]+stories[storyGraceOut] {
		t.Fatalf("%d subscription orders of %d Yolfi orders, stories %v, %d lapsing", st.Orders, yolfiOrders, stories, st.Lapsing)
	}
	if st.Renewals == 0 || st.Reannounced == 0 || st.ExtraPayments == 0 || st.OutOfOrder == 0 || st.Overdue == 0 || st.Cancelled == 0 || st.InvoiceOverdue == 0 {
		t.Fatalf("missing ingredients: %+v", st)
	}
	deliveries := map[int]int{}
	for _, d := range w.deliveries {
		deliveries[d.ev]++
	}
	events := map[int][]int{}
	n, early := 0, 0
	naming, namingExtra, namingAgain := 0, 0, 0
	paid := map[string]bool{} // the renewal payments planned, first announcements
	for j, e := range w.events {
		o := w.orders[max(e.order, 0)]
		if e.order < 0 || o.sub == nil {
			continue
		}
		n++
		if o.sub.tbank || o.lateFirstSub() {
			continue
		}
		events[e.order] = append(events[e.order], j)
		ev, err := parseYolfi(e)
		if err != nil || ev.EventID != e.id || ev.Payment.SubscriptionID != o.sub.id || ev.TestMode {
			t.Fatalf("%s parses to %+v: %v", e.id, ev, err)
		}
		if !ev.OccurredAt.IsZero() && (ev.OccurredAt.After(base.Add(12*time.Hour)) || !fulfillment.PlausibleOccurrence(ev.OccurredAt, base).Equal(ev.OccurredAt)) {
			t.Fatalf("%s dated %s: more than 12h after the start %s", e.id, ev.OccurredAt, base)
		}
		// A renewal comes after the first payment, or early: before it, the
		// first payment after it.
		after := slices.Contains(e.after, o.sub.first) || e.early && slices.Contains(w.events[o.sub.first].after, j)
		if e.role == roleRenewal && (deliveries[j] < 2 || !after) {
			t.Fatalf("renewal %s delivered %d times, after %v (the first payment is %d, early %v)", e.id, deliveries[j], e.after, o.sub.first, e.early)
		}
		if e.early {
			early++
		}
		// A renewal naming its order is sent once the first payment is
		// applied, never early: that payment has paid the order then.
		if e.role == roleRenewal && ev.Payment.MerchantOrderID != "" {
			if ev.Payment.MerchantOrderID != o.mid || e.early || !slices.Contains(e.after, o.sub.first) || w.events[o.sub.first].afterDecided && slices.Contains(w.events[o.sub.first].after, j) {
				t.Fatalf("renewal %s names order %q, early %v, after %v (the first payment is %d)", e.id, ev.Payment.MerchantOrderID, e.early, e.after, o.sub.first)
			}
			naming++
			namingExtra += btoi(strings.HasSuffix(e.payment, "_b"))
			namingAgain += btoi(paid[e.payment])
		}
		if e.role == roleRenewal {
			paid[e.payment] = true
		}
	}
	if early != st.Early || early == 0 {
		t.Fatalf("%d early subscription events, stats %d", early, st.Early)
	}
	if naming != st.NamingOrder || naming < st.Renewals/5 || namingExtra == 0 || namingAgain == 0 {
		t.Fatalf("%d renewal payments name their order (%d second payments of a bill, %d announced again), stats %d, of %d renewals",
			naming, namingExtra, namingAgain, st.NamingOrder, st.Renewals)
	}
	if n != st.Events {
		t.Fatalf("%d subscription events, stats %d", n, st.Events)
	}

	rng := rand.New(rand.NewPCG(3, 4))
	check := base.Add(10 * time.Minute)
	for i, evs := range events {
		o := w.orders[i]
		for try := range 30 {
			seq := gatedOrder(w, evs, rng)
			rp := newSubReplay(o)
			var ends []time.Time
			var byRules []bool
			for k, j := range seq {
				ev, _ := parseYolfi(w.events[j])
				step := rp.apply(ev, base.Add(w.events[j].at+time.Duration(k)*time.Millisecond))
				ends = append(ends, rp.sub.AccessEnds(o.sub.plan))
				byRules = append(byRules, step.sub && !step.order)
			}
			for k := range seq {
				if slices.Contains(byRules[k+1:], true) && !ends[k].IsZero() && ends[k].Before(base.Add(aheadMargin)) {
					t.Fatalf("subscription %s (%s), try %d: access ends at %s after event %d of %d, before the run is over",
						o.sub.id, o.sub.story, try, ends[k], k, len(seq))
				}
			}
			rp.sweep(check)
			if rp.swept != o.sub.lapses() || !rp.exists {
				t.Fatalf("subscription %s (%s), try %d: swept at the check %v, state %s, access ends %s",
					o.sub.id, o.sub.story, try, rp.swept, rp.sub.State, rp.sub.AccessEnds(o.sub.plan))
			}
		}
	}
}

// gatedOrder is a random processing order of evs, one subscription
// order's events, that the gates allow: an event is delivered once those
// it comes after are applied (or, for one that waits for decisions only,
// decided). An early event delivered before the subscription exists is
// decided unmatched, and queued again when the payment that creates it is
// applied: it is then applied in any order with the others.
func gatedOrder(w *workload, evs []int, rng *rand.Rand) []int {
	decided, applied, exists := map[int]bool{}, map[int]bool{}, false
	var seq []int
	for len(seq) < len(evs) {
		var ready []int
		for _, j := range evs {
			e := w.events[j]
			done := applied
			if e.afterDecided {
				done = decided
			}
			if !applied[j] && (!decided[j] || exists) && !slices.ContainsFunc(e.after, func(a int) bool { return !done[a] }) {
				ready = append(ready, j)
			}
		}
		j := ready[rng.IntN(len(ready))]
		e := w.events[j]
		decided[j] = true
		if e.early && !exists {
			continue // unmatched, until the subscription exists
		}
		applied[j], seq = true, append(seq, j)
		if e.typ == yolfi.TypePaymentConfirmed && (e.role == rolePay || e.role == roleReannounce) {
			exists = true
		}
	}
	return seq
}

// subStoryForTest is a subscription order of the monthly plan started on
// Jan 1, told on Mar 31: its first payment, renewals of Feb and Mar (that
// of Feb announced twice), an overdue of Feb 2, a second payment of the
// March invoice, the cancellation of Mar 4, and the renewal of April
// charged (on Mar 31) after it.
func subStoryForTest(t *testing.T) (w *workload, ev map[string]int) {
	t.Helper()
	jan1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w = &workload{}
	w.g = &generator{rng: rand.New(rand.NewPCG(1, 2)), w: w, base: jan1.AddDate(0, 3, -1)}
	sp := &subPlan{id: "ysub_m-1", customer: "cust_m-1", cfg: planMonthly, plan: planMonthly.Domain(), start: jan1, periods: 4,
		story: storyCancelled}
	w.orders = []*orderPlan{{mid: "m-1", sub: sp}}
	g := w.g
	ev = map[string]int{}
	month := func(n int) time.Time { return jan1.AddDate(0, n, 0) }
	ev["first"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_1", "pay_1", jan1, true, rolePay, 0, nil)
	sp.first = ev["first"]
	ev["feb"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_2", "pay_2", month(1), false, roleRenewal, 0, nil)
	ev["feb again"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_2", "pay_2", month(1), false, roleRenewal, 0, nil)
	ev["overdue"] = g.addSub(0, yolfi.TypeSubscriptionOverdue, "", "", month(1).AddDate(0, 0, 1), false, roleLifecycle, 0, nil)
	ev["mar"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_3", "pay_3", month(2), false, roleRenewal, 0, nil)
	ev["mar extra"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_3", "pay_3b", month(2).Add(time.Hour), false, roleRenewal, 0, nil)
	ev["cancel"] = g.addSub(0, yolfi.TypeSubscriptionCancelled, "", "", month(2).AddDate(0, 0, 3), false, roleLifecycle, 0, nil)
	ev["apr"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_4", "pay_4", month(3).Add(-12*time.Hour), false, roleRenewal, 0, nil)
	return w, ev
}

// The replay of a subscription: the first payment pays period 1 through
// its order; a renewal pays the next period whichever bill it is (March's,
// applied first, pays period 2); an overdue older than it is stale; the
// same payment again is already applied, another payment of a paid bill an
// extra payment (an item); the cancellation keeps the paid periods, a
// charge after it is an extra payment; the sweeper ends access once the
// paid periods are over.
func TestSubscriptionReplay(t *testing.T) {
	t.Parallel()
	w, ev := subStoryForTest(t)
	rp := newSubReplay(w.orders[0])
	var got []string
	for _, name := range []string{"first", "mar", "overdue", "feb", "feb again", "mar extra", "cancel", "apr"} {
		e := w.events[ev[name]]
		pe, err := parseYolfi(e)
		if err != nil {
			t.Fatal(err)
		}
		step := rp.apply(pe, w.g.base)
		got = append(got, fmt.Sprintf("%s:%s%s", name, step.decision, map[bool]string{true: "+sub"}[step.sub]))
	}
	want := "[first:fulfilled+sub mar:renewed+sub overdue:stale_ignored+sub feb:renewed+sub feb again:already_applied+sub " +
		"mar extra:duplicate_payment+sub cancel:subscription_cancelled+sub apr:duplicate_payment+sub]"
	if fmt.Sprint(got) != want {
		t.Errorf("decisions %v,\nwant %s", got, want)
	}
	jan1 := w.orders[0].sub.start
	if fmt.Sprint(rp.periods) != fmt.Sprintf("[%v %v %v]",
		subPeriodRow{1, "invoice:inv_1", "pay_1", jan1, jan1.AddDate(0, 1, 0)},
		subPeriodRow{2, "invoice:inv_3", "pay_3", jan1.AddDate(0, 1, 0), jan1.AddDate(0, 2, 0)},
		subPeriodRow{3, "invoice:inv_2", "pay_2", jan1.AddDate(0, 2, 0), jan1.AddDate(0, 3, 0)}) {
		t.Errorf("periods %v", rp.periods)
	}
	if rp.sub.State != fulfillment.SubCancelled || len(rp.items) != 2 || len(rp.topics) != 3 || rp.order.State != fulfillment.StateFulfilled {
		t.Errorf("state %s, items %v, events %v, order %s", rp.sub.State, rp.items, rp.topics, rp.order.State)
	}
	rp.sweep(jan1.AddDate(0, 3, 0).Add(-time.Second))
	if rp.swept {
		t.Errorf("swept within the paid period")
	}
	rp.sweep(jan1.AddDate(0, 3, 0))
	if !rp.swept || rp.sub.State != fulfillment.SubExpired || rp.topics["subscription.access_ended|3"] != 1 {
		t.Errorf("at the end of the paid periods: swept %v, state %s, events %v", rp.swept, rp.sub.State, rp.topics)
	}
}

// The replay of renewals that name the subscription's order too, the
// order paid by the first payment: each is the subscription's renewal, as
// if it named no order — February's pays period 2, its announcement again
// (naming the order or not) is already applied, the second payment of
// March's bill, first to come, pays period 3 and March's own payment is
// then the extra payment (an item of the subscription), the charge after
// the cancellation too — none linked to the order, which
// keeps its payment, its attempt and no item. The first payment announced
// again stays the order's (already applied).
func TestSubscriptionReplayNamingOrder(t *testing.T) {
	t.Parallel()
	w, ev := subStoryForTest(t)
	sp, g := w.orders[0].sub, w.g
	month := func(n int) time.Time { return sp.start.AddDate(0, n, 0) }
	ev["feb"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_2", "pay_2", month(1), true, roleRenewal, 0, nil)
	ev["feb again"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_2", "pay_2", month(1), true, roleRenewal, 0, nil)
	ev["feb once more"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_2", "pay_2", month(1), false, roleRenewal, 0, nil)
	ev["mar extra"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_3", "pay_3b", month(2).Add(time.Hour), true, roleRenewal, 0, nil)
	ev["apr"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_4", "pay_4", month(3).Add(-12*time.Hour), true, roleRenewal, 0, nil)
	ev["first again"] = g.addSub(0, yolfi.TypePaymentConfirmed, "inv_1", "pay_1", sp.start, true, roleReannounce, 0, nil)
	rp := newSubReplay(w.orders[0])
	var got []string
	for _, name := range []string{"first", "feb", "feb again", "mar extra", "feb once more", "mar", "first again", "cancel", "apr"} {
		pe, err := parseYolfi(w.events[ev[name]])
		if err != nil {
			t.Fatal(err)
		}
		step := rp.apply(pe, g.base)
		got = append(got, fmt.Sprintf("%s:%s%s%s", name, step.decision, map[bool]string{true: "+order"}[step.order], map[bool]string{true: "+sub"}[step.sub]))
	}
	want := "[first:fulfilled+order+sub feb:renewed+sub feb again:already_applied+sub mar extra:renewed+sub " +
		"feb once more:already_applied+sub mar:duplicate_payment+sub first again:already_applied+order " +
		"cancel:subscription_cancelled+sub apr:duplicate_payment+sub]"
	if fmt.Sprint(got) != want {
		t.Errorf("decisions %v,\nwant %s", got, want)
	}
	var bills []string
	for _, p := range rp.periods {
		bills = append(bills, fmt.Sprintf("%d:%s:%s", p.period, p.key, p.payment))
	}
	if fmt.Sprint(bills) != "[1:invoice:inv_1:pay_1 2:invoice:inv_2:pay_2 3:invoice:inv_3:pay_3b]" {
		t.Errorf("periods %v", bills)
	}
	items := slices.Sorted(maps.Keys(rp.items))
	if len(items) != 2 || !strings.HasPrefix(items[0], itemExtraPayment+"|") || !strings.HasPrefix(items[1], itemExtraPayment+"|") ||
		rp.topics["subscription.renewed|2"] != 1 || rp.topics["subscription.renewed|3"] != 1 || len(rp.topics) != 3 {
		t.Errorf("items %v, events %v; want two extra_payment items, subscription.renewed of periods 1 to 3", items, rp.topics)
	}
	o := rp.order
	if o.State != fulfillment.StateFulfilled || o.PaidBy.PaymentID != "pay_1" || len(o.Attempts) != 1 || o.Attempts[fulfillment.AttemptKey{Provider: fulfillment.ProviderYolfi, Ref: "inv_1"}] != fulfillment.AttemptConfirmed || len(rp.orderItems) != 0 {
		t.Errorf("the order is %s paid by %s, attempts %v, items %v; want fulfilled by pay_1, inv_1 confirmed alone, no item",
			o.State, o.PaidBy.PaymentID, o.Attempts, rp.orderItems)
	}
}

// subCheckFixture is the story of subStoryForTest processed in one order
// on Mar 31, and a database holding exactly what the rules say it leaves,
// swept on May 1.
func subCheckFixture(t *testing.T) (*runner, *dbState) {
	t.Helper()
	w, ev := subStoryForTest(t)
	o := w.orders[0]
	jan1 := o.sub.start
	now := jan1.AddDate(0, 4, 0)
	s := &dbState{inbox: map[string][]inboxRow{}, byOrder: map[string][]inboxRow{}, orders: map[string]orderRow{},
		eventIDs: map[int64]string{}, licenses: map[string]int{}, ledger: map[string]int{}, attempts: map[string]map[string]string{},
		subs: &subscriptionState{now: now, rows: map[string]subRow{}, periods: map[string][]subPeriodRow{}, events: map[string]map[string]int{}}}
	const orderID, subID = "order-1", "sub-1"
	rp := newSubReplay(o)
	for k, name := range []string{"first", "feb", "feb again", "overdue", "mar", "mar extra", "cancel", "apr"} {
		e := w.events[ev[name]]
		pe, err := parseYolfi(e)
		if err != nil {
			t.Fatal(err)
		}
		at := w.g.base.Add(time.Duration(k) * time.Second)
		step := rp.apply(pe, at)
		row := inboxRow{id: int64(k + 1), eventID: e.id, endpoint: liveEP, env: "live", state: "processed", decision: string(step.decision),
			received: at, processedAt: at, seq: k + 1}
		if step.order {
			row.orderID = orderID
			s.byOrder[orderID] = append(s.byOrder[orderID], row)
		}
		if step.sub {
			row.subID = subID
		}
		s.inbox[e.id], s.eventIDs[row.id] = []inboxRow{row}, e.id
	}
	rp.sweep(now)
	s.orders[o.mid] = orderRow{id: orderID, env: "live", state: string(rp.order.State), paidAttempt: "inv_1", paidPayID: "pay_1"}
	s.attempts[orderID] = map[string]string{"inv_1": "confirmed"}
	s.subs.rows[o.sub.id] = subRow{id: subID, providerID: o.sub.id, customer: o.sub.customer, plan: o.sub.cfg.ID,
		state: string(rp.sub.State), periods: rp.sub.Periods, periodEnd: rp.sub.PeriodEnd, lastEventAt: rp.sub.LastEventAt, accessEnded: rp.sub.AccessEnded, cancelledAt: rp.sub.CancelledAt}
	s.subs.periods[subID] = slices.Clone(rp.periods)
	s.subs.events[subID] = maps.Clone(rp.topics)
	for k := range rp.items {
		kind, eventID, _ := strings.Cut(k, "|")
		for id, evID := range s.eventIDs {
			if evID == eventID {
				s.items = append(s.items, itemRow{kind: kind, state: "open", env: "live", subscriptionID: subID, inboxID: id})
			}
		}
	}
	if len(s.items) != 2 || !rp.swept {
		t.Fatalf("fixture: items %v, swept %v", s.items, rp.swept)
	}
	return &runner{o: Options{Log: io.Discard}, w: w, viol: newViolations()}, s
}

// The subscription check passes the database the rules leave, and counts
// what differs: a period missing is lost; a period no bill paid, a bill
// paid twice, a second access_ended or a second item is duplicated.
func TestSubscriptionCheck(t *testing.T) {
	t.Parallel()
	const subID = "sub-1"
	for _, tc := range []struct {
		name      string
		spoil     func(s *dbState)
		lost, dup int
	}{
		{"as the rules say", func(*dbState) {}, 0, 0},
		{"a period missing", func(s *dbState) { s.subs.periods[subID] = s.subs.periods[subID][:2] }, 1, 0},
		{"an extra period", func(s *dbState) {
			p := s.subs.periods[subID]
			s.subs.periods[subID] = append(p, subPeriodRow{4, "invoice:inv_4", "pay_4", p[2].end, p[2].end.AddDate(0, 1, 0)})
		}, 0, 1},
		{"a bill paid twice", func(s *dbState) {
			p := s.subs.periods[subID]
			s.subs.periods[subID] = append(p, subPeriodRow{4, p[2].key, p[2].payment, p[2].end, p[2].end.AddDate(0, 1, 0)})
		}, 0, 1},
		{"a second access_ended", func(s *dbState) { s.subs.events[subID]["subscription.access_ended|3"] = 2 }, 0, 1},
		{"access_ended of another period", func(s *dbState) { s.subs.events[subID]["subscription.access_ended|2"] = 1 }, 0, 1},
		{"access never ended", func(s *dbState) {
			row := s.subs.rows["ysub_m-1"]
			row.accessEnded, row.state = false, "cancelled"
			s.subs.rows["ysub_m-1"] = row
			delete(s.subs.events[subID], "subscription.access_ended|3")
		}, 1, 0},
		{"a renewal event missing", func(s *dbState) { delete(s.subs.events[subID], "subscription.renewed|2") }, 1, 0},
		{"an extra_payment item twice", func(s *dbState) { s.items = append(s.items, s.items[0]) }, 0, 1},
		{"an extra_payment item of the order", func(s *dbState) {
			it := s.items[0]
			it.subscriptionID, it.orderID = "", "order-1"
			s.items = append(s.items, it)
		}, 0, 1},
		{"the subscription not stored", func(s *dbState) {
			delete(s.subs.rows, "ysub_m-1")
			s.subs.periods, s.subs.events, s.items = nil, nil, nil
			for id, rows := range s.inbox {
				rows[0].subID = ""
				s.inbox[id] = rows
			}
		}, 3 + 5 + 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, s := subCheckFixture(t)
			tc.spoil(s)
			r.checkSubscriptions(s)
			wantCounted(t, r, "subscriptions", r.rep.Subscriptions.Lost, r.rep.Subscriptions.Duplicated, tc.lost, tc.dup)
		})
	}
}

// A decision the rules would not have made is reported.
func TestSubscriptionCheckDecision(t *testing.T) {
	t.Parallel()
	r, s := subCheckFixture(t)
	for id, rows := range s.inbox {
		if rows[0].decision == string(fulfillment.DecisionPastDue) {
			rows[0].decision = string(fulfillment.DecisionStaleIgnored)
			s.inbox[id] = rows
		}
	}
	r.checkSubscriptions(s)
	if v := r.viol.list(); len(v) != 1 || !strings.HasPrefix(v[0], "wrong decision") {
		t.Errorf("violations %v, want one wrong decision", v)
	}
}

// The late-order check: an order created once its events were decided
// must have each of them queued again, each payment's item resolved once;
// a racing one (created while they were being processed) may have them
// matched at once instead, but none left unmatched.
func TestLateOrderCheck(t *testing.T) {
	t.Parallel()
	type event struct {
		state       string
		lateMatched bool
	}
	for _, tc := range []struct {
		name      string
		racing    bool
		ev        event
		items     int // resolved unmatched_payment items of the payment
		fails     bool
		lost, dup int
	}{
		{"late: queued again, its item resolved", false, event{"processed", true}, 1, false, 0, 0},
		{"late: not queued again", false, event{"processed", false}, 1, true, 0, 0},
		{"late: left unmatched", false, event{"unmatched", false}, 0, true, 1, 0},
		{"late: its item resolved twice", false, event{"processed", true}, 2, true, 0, 1},
		{"racing: matched at once", true, event{"processed", false}, 0, false, 0, 0},
		{"racing: queued again, its item resolved", true, event{"processed", true}, 1, false, 0, 0},
		{"racing: queued again, no item resolved", true, event{"processed", true}, 0, true, 1, 0},
		{"racing: matched at once, an item resolved", true, event{"processed", false}, 1, true, 0, 1},
		{"racing: left unmatched", true, event{"unmatched", false}, 0, true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := &workload{
				orders: []*orderPlan{{mid: "chaos-000001", late: true, racing: tc.racing}},
				events: []*eventPlan{{id: "evt_1", order: 0, typ: yolfi.TypePaymentConfirmed, payment: "pay_1"}},
			}
			s := &dbState{inbox: map[string][]inboxRow{"evt_1": {{id: 1, eventID: "evt_1", env: "live",
				state: tc.ev.state, lateMatched: tc.ev.lateMatched}}}}
			matchedLater := map[string]int{}
			if tc.items > 0 {
				matchedLater["pay_1"] = tc.items
			}
			r := &runner{o: Options{Log: io.Discard}, w: w, viol: newViolations()}
			c := Check{}
			r.checkLateOrder(s, 0, []int{0}, matchedLater, &c)
			if (c.Failed > 0) != tc.fails || r.rep.Lost != tc.lost || r.rep.DuplicatedEffects != tc.dup {
				t.Errorf("failed %d, lost %d, duplicated %d; want failed %v, lost %d, duplicated %d (violations %v)",
					c.Failed, r.rep.Lost, r.rep.DuplicatedEffects, tc.fails, tc.lost, tc.dup, r.viol.list())
			}
		})
	}
}

// Charged subscriptions are about a quarter of the T-Bank share, each
// registered with 1 to 3 charges; their notifications are signed and parse
// to their planned id, the charges naming the card binding; every charge
// and refund is delivered twice at least; a refund sent after its charge
// waits for it to be applied, one sent before it has the charge wait for
// its decision (unmatched), one racing it is sent with it (a partial one
// first: the rest after) and waits for nothing — each kind
// planned, partial refunds too.
func TestChargeWorkload(t *testing.T) {
	t.Parallel()
	w := plan(7, 800, 8000, 30*time.Second)
	st := w.stats.Subscriptions
	tbankShare := st.Registered + w.stats.TBank.Orders
	if st.Registered < tbankShare/8 || st.Registered > tbankShare/2 || st.Charges < st.Registered || st.Charges > 3*st.Registered {
		t.Fatalf("%d charged subscriptions of %d T-Bank orders and subscriptions, %d charges", st.Registered, tbankShare, st.Charges)
	}
	if st.RefundedCharges == 0 || st.RefundsFirst == 0 || st.RefundsRacing == 0 || st.PartialChargeRefunds == 0 ||
		st.ChargeRefunds != st.RefundedCharges+st.PartialChargeRefunds {
		t.Fatalf("missing ingredients: %+v", st)
	}
	deliveries := map[int]int{}
	for _, d := range w.deliveries {
		deliveries[d.ev]++
	}
	charge := map[string]int{} // payment → its CONFIRMED
	early, racing, registered := 0, 0, 0
	for j, e := range w.events {
		if e.order < 0 || w.orders[e.order].sub == nil || !w.orders[e.order].sub.tbank {
			continue
		}
		sp := w.orders[e.order].sub
		for _, body := range [][]byte{e.body, e.alt} {
			if err := tbank.Verify(body, [][]byte{[]byte(testTBankPassword)}); err != nil {
				t.Fatalf("%s: %v", e.id, err)
			}
			ev, err := tbank.Parse(tbankEndpoint, tbankTerminal, body)
			if err != nil || ev.EventID != e.id || ev.Payment.PaymentID != e.payment ||
				(e.typ == tbank.StatusConfirmed && ev.Payment.SubscriptionID != sp.id) {
				t.Fatalf("%s parses to %+v: %v", e.id, ev, err)
			}
		}
		if deliveries[j] < 2 {
			t.Fatalf("%s delivered %d times, want 2 at least", e.id, deliveries[j])
		}
		if e.typ == tbank.StatusConfirmed {
			charge[e.payment] = j
		}
	}
	for i, o := range w.orders {
		if o.sub != nil && o.sub.tbank {
			registered++
			if r := o.sub.registration(); r.GetProviderSubscriptionId() != o.sub.id || r.GetProvider() != "tbank" || i == 0 {
				t.Fatalf("order %d: registration %v", i, r)
			}
		}
	}
	for j, e := range w.events {
		if e.role != roleRefund || w.orders[e.order].sub == nil {
			continue
		}
		c := w.events[charge[e.payment]]
		switch {
		case e.early:
			early++
			if !slices.Contains(c.after, j) || !c.afterDecided {
				t.Fatalf("refund %s is sent first, but its charge waits for %v (decided %v)", e.id, c.after, c.afterDecided)
			}
		case len(e.after) == 0:
			racing++
			if e.at < c.at {
				t.Fatalf("racing refund %s at %v, before its charge at %v", e.id, e.at, c.at)
			}
		case !slices.Equal(e.after, []int{charge[e.payment]}) || e.afterDecided:
			t.Fatalf("refund %s waits for %v, not its charge %d applied", e.id, e.after, charge[e.payment])
		}
	}
	if early != st.RefundsFirst || racing != st.RefundsRacing || registered != st.Registered || len(charge) != st.Charges {
		t.Fatalf("%d refunds first, %d racing, %d registered, %d charges; stats %+v", early, racing, registered, len(charge), st)
	}
}

// chargeStoryForTest is a charged subscription with three charges: the
// first refunded in full after it (naming no binding), the second
// refunded before it was charged, the third partly refunded, then in
// full naming the binding.
func chargeStoryForTest() (w *workload, ev map[string]int) {
	w = &workload{tbankPassword: []byte(testTBankPassword)}
	w.g = &generator{rng: rand.New(rand.NewPCG(1, 2)), w: w}
	sp := &subPlan{id: bindingID(1), customer: "cust_m-1", cfg: planMonthly, plan: planMonthly.Domain(), tbank: true, periods: 3}
	w.orders = []*orderPlan{{mid: "m-1", sub: sp}}
	g := w.g
	ev = map[string]int{
		"c1":         g.addCharge(0, tbank.StatusConfirmed, chargeID(1, 1), "m-1-c1", rubPeriod, true, roleRenewal, 0, nil),
		"r1":         g.addCharge(0, tbank.StatusRefunded, chargeID(1, 1), "m-1-c1", rubPeriod, false, roleRefund, 0, nil),
		"r2":         g.addCharge(0, tbank.StatusRefunded, chargeID(1, 2), "m-1-c2", rubPeriod, false, roleRefund, 0, nil),
		"c2":         g.addCharge(0, tbank.StatusConfirmed, chargeID(1, 2), "m-1-c2", rubPeriod, true, roleRenewal, 0, nil),
		"c3":         g.addCharge(0, tbank.StatusConfirmed, chargeID(1, 3), "m-1-c3", rubPeriod, true, roleRenewal, 0, nil),
		"r3 partial": g.addCharge(0, tbank.StatusPartialRefunded, chargeID(1, 3), "m-1-c3", 1000, false, roleRefund, 0, nil),
		"r3":         g.addCharge(0, tbank.StatusRefunded, chargeID(1, 3), "m-1-c3", rubPeriod-1000, true, roleRefund, 0, nil),
	}
	return w, ev
}

// replayCharges replays the events of chargeStoryForTest named in order,
// a second apart from at, and returns the replay and the decisions.
func replayCharges(t *testing.T, w *workload, ev map[string]int, at time.Time, order ...string) (*subReplay, []inboxRow, string) {
	t.Helper()
	rp := newSubReplay(w.orders[0])
	var got []string
	var seq []inboxRow
	for k, name := range order {
		e := w.events[ev[name]]
		pe, err := parseEvent(e)
		if err != nil {
			t.Fatal(err)
		}
		received := at.Add(time.Duration(k) * time.Second)
		step := rp.applyCharge(pe, received)
		got = append(got, fmt.Sprintf("%s:%s%s", name, step.decision, map[bool]string{true: "+sub"}[step.sub]))
		state := "processed"
		if step.decision == fulfillment.DecisionUnmatched {
			state = "unmatched"
		}
		seq = append(seq, inboxRow{id: int64(k + 1), eventID: e.id, state: state, decision: string(step.decision), received: received, seq: k + 1})
	}
	return rp, seq, strings.Join(got, " ")
}

// The replay of a charged subscription: a refund before its charge waits,
// unmatched; the first charge pays a period that begins at once, so its
// refund ends access at the refund (an item, access_ended); a charge after
// that starts a new period at its payment, and the refund queued again
// behind it refunds that one; a partial refund keeps access (an item), and
// the full refund after it ends it again (an item more).
func TestChargeReplay(t *testing.T) {
	t.Parallel()
	w, ev := chargeStoryForTest()
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	rp, _, got := replayCharges(t, w, ev, at, "r2", "c1", "r1", "c2", "r2", "c3", "r3 partial", "r3")
	want := "r2:unmatched c1:renewed+sub r1:subscription_refunded+sub c2:renewed+sub r2:subscription_refunded+sub " +
		"c3:renewed+sub r3 partial:partially_refunded+sub r3:subscription_refunded+sub"
	if got != want {
		t.Errorf("decisions %s,\nwant %s", got, want)
	}
	if keys := rp.refundedKeys(); len(keys) != 3 {
		t.Errorf("periods refunded %v, want all three", keys)
	}
	wantItems := map[string]int{chargeID(1, 1): 1, chargeID(1, 2): 1, chargeID(1, 3): 2}
	if !maps.Equal(rp.chargeItems, wantItems) || rp.sub.State != fulfillment.SubExpired ||
		rp.topics["subscription.access_ended|1"] != 1 || rp.topics["subscription.access_ended|2"] != 1 {
		t.Errorf("items by charge %v, state %s, events %v", rp.chargeItems, rp.sub.State, rp.topics)
	}

	// The refund received before its charge: none of the period is
	// granted, and there is nothing to end.
	rp, _, got = replayCharges(t, w, ev, at, "c1", "r2", "c2", "r2")
	if want := "c1:renewed+sub r2:unmatched c2:renewed+sub r2:subscription_refunded+sub"; got != want || len(rp.chargeItems) != 0 ||
		rp.sub.State != fulfillment.SubActive || rp.sub.PeriodEnd != rp.sub.Renewals["payment:"+chargeID(1, 2)].Start {
		t.Errorf("decisions %s, items %v, state %s, period end %s; want %s, no item, active to the end of period 1",
			got, rp.chargeItems, rp.sub.State, rp.sub.PeriodEnd, want)
	}
}

// The charge check counts what a refund left against the rules: a period
// not marked refunded or a refund left unmatched behind its charge is
// lost, a mark the rules did not make duplicated; an item of a charge
// beyond the rules' is reported (and counted in the share).
func TestChargeCheck(t *testing.T) {
	t.Parallel()
	w, ev := chargeStoryForTest()
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	events := map[string]*eventPlan{}
	for _, e := range w.events {
		events[e.id] = e
	}
	for _, tc := range []struct {
		name      string
		order     []string
		spoil     func(c *chargeCheck)
		lost, dup int
		share     int // the share's lost and duplicated
	}{
		{"as the rules say", []string{"c1", "r1"}, func(*chargeCheck) {}, 0, 0, 0},
		{"a refunded mark missing", []string{"c1", "r1"}, func(c *chargeCheck) { c.refunded = nil }, 1, 0, 1},
		{"a mark the rules did not make", []string{"c1"}, func(c *chargeCheck) { c.refunded = []string{"payment:" + chargeID(1, 1)} }, 0, 1, 1},
		{"a refund left unmatched behind its charge", []string{"r2", "c2"}, func(*chargeCheck) {}, 1, 0, 1},
		{"a second item of a charge", []string{"c1", "r1"}, func(c *chargeCheck) { c.items[chargeID(1, 1)]++ }, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rp, seq, _ := replayCharges(t, w, ev, at, tc.order...)
			c := chargeCheck{rp: rp, seq: seq, refunded: rp.refundedKeys(), paid: map[string]bool{}, items: maps.Clone(rp.chargeItems)}
			for _, p := range rp.periods {
				c.paid[p.payment] = true
			}
			tc.spoil(&c)
			r := &runner{o: Options{Log: io.Discard}, w: w, viol: newViolations()}
			lost, dup, diffs := r.checkCharges(c, events)
			sb := r.rep.Subscriptions
			if lost != tc.lost || dup != tc.dup || sb.ChargeLost+sb.ChargeDuplicated != tc.share || (len(diffs) == 0) != (tc.share == 0) {
				t.Errorf("lost %d, duplicated %d, share %d+%d, diffs %v; want %d, %d, %d", lost, dup, sb.ChargeLost, sb.ChargeDuplicated,
					diffs, tc.lost, tc.dup, tc.share)
			}
		})
	}
}

// wantCounted fails t unless a check of r counted lost and dup effects, in
// the run's totals and in its own part of the report (partLost, partDup,
// named part), and failed checks and reported violations exactly when it
// counted any.
func wantCounted(t *testing.T, r *runner, part string, partLost, partDup, lost, dup int) {
	t.Helper()
	failed := 0
	for _, c := range r.rep.Checks {
		failed += c.Failed
	}
	clean := lost+dup == 0
	if r.rep.Lost != lost || r.rep.DuplicatedEffects != dup || partLost != lost || partDup != dup ||
		(failed == 0) != clean || (len(r.viol.list()) == 0) != clean {
		t.Errorf("lost %d (%s %d), duplicated %d (%d), %d checks failed; want %d lost, %d duplicated; violations %v",
			r.rep.Lost, part, partLost, r.rep.DuplicatedEffects, partDup, failed, lost, dup, r.viol.list())
	}
}
