package chaos

// The T-Bank side of a run: about a quarter of the orders are priced in RUB
// and paid through a T-Bank endpoint, whose notifications (signed inside
// the body, acknowledged only by a body of exactly OK) come through the same
// retrying sender as Yolfi's, under the same kills and outages: AUTHORIZED
// and CONFIRMED in either order, redelivered (some concurrently) with
// PaymentId spelled as a number or a string, and for some orders refunds —
// partial ones of distinct amounts, a full one, or partial ones then the
// full one — each delivered twice at least. The check replays each order's
// notifications, in processing order, through the state machine
// (fulfillment.Decide, on the events the adapter parses from the very
// bytes sent) and holds the database to the effects it gives.

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

// The T-Bank endpoint of a run, and what its orders cost.
const (
	tbankEP       = "tbank-live"
	tbankTerminal = "ChaosTerminalDEMO"
	rubLicense    = 19900 // kopecks per license
	rubCredit     = 50000 // kopecks of the balance credit
	itemRefund    = string(fulfillment.ReconRefundAfterFulfill)
	// itemRefundNotApplicable: a partial refund after the full one, say,
	// which the reordered deliveries make.
	itemRefundNotApplicable = string(fulfillment.ReconRefundNotApplicable)
)

// tbankEndpoint is the endpoint as the service knows it: the checker parses
// what it sent the way the service does.
var tbankEndpoint = fulfillment.Endpoint{ID: tbankEP, Provider: fulfillment.ProviderTBank, OrgID: orgID, Environment: fulfillment.EnvLive}

// session is the T-Bank OrderId of the order's payment: its checkout
// session.
func (o *orderPlan) session() string { return o.mid + "-1" }

// paymentID is the bank's PaymentId of order i's payment; rejectedID that
// of a payment of the same checkout the bank rejected before.
func paymentID(i int) string  { return strconv.Itoa(6_000_000_000 + i) }
func rejectedID(i int) string { return strconv.Itoa(7_000_000_000 + i) }

// total is what a T-Bank order costs, in kopecks.
func (o *orderPlan) total() int64 { return o.licenseQty*rubLicense + rubCredit }

// tbankRequest is the CreateOrder request of a T-Bank order.
func (o *orderPlan) tbankRequest() *fulfillmentv1.CreateOrderRequest {
	return &fulfillmentv1.CreateOrderRequest{
		OrgId: orgID, Environment: "live", MerchantOrderId: o.mid, CheckoutSessionId: o.session(),
		Lines: []*fulfillmentv1.OrderLine{
			{Sku: licenseSKU, Kind: "license", Quantity: o.licenseQty, UnitPrice: &fulfillmentv1.Money{Currency: tbank.Currency, MinorUnits: rubLicense}},
			{Sku: creditSKU, Kind: "balance_credit", Quantity: 1, AccountRef: "acct_" + o.mid,
				UnitPrice: &fulfillmentv1.Money{Currency: tbank.Currency, MinorUnits: rubCredit}},
		},
	}
}

// planTBank plans the notifications of T-Bank order i: now and then a
// payment rejected first; AUTHORIZED and CONFIRMED of the payment, each at
// its own moment (so AUTHORIZED comes last about half the time); for 40%
// of the orders refunds after the confirmation, one after the other. A
// fifth of the orders are overpaid instead (planOverpaid).
func (g *generator) planTBank(i int, at func(int) time.Duration, spread, window time.Duration) {
	o, st := g.w.orders[i], &g.w.stats.TBank
	total, pay := o.total(), paymentID(i)
	st.Orders++
	// A fifth paid more than their total (overpaid.go); every run has one,
	// however short.
	if g.w.stats.Overpaid.Orders == 0 || g.rng.IntN(5) == 0 {
		g.planOverpaid(i, 3+g.rng.Int64N(total/2), at, spread, window)
		return
	}
	if g.rng.Float64() < 0.1 {
		g.addTBank(i, tbank.StatusRejected, rejectedID(i), total, fakebank.CodeDeclined, roleAbandoned, at(i))
	}
	g.addTBank(i, tbank.StatusAuthorized, pay, total, "", rolePay, at(i))
	confirmAt := at(i)
	g.addTBank(i, tbank.StatusConfirmed, pay, total, "", rolePay, confirmAt)

	partials, full := 0, true
	switch x := g.rng.Float64(); {
	case x >= 0.4:
		return
	case x < 0.13: // the full refund only
	case x < 0.27:
		partials, full = 1+g.rng.IntN(3), false
	default: // partial ones, then the rest
		partials = 1 + g.rng.IntN(2)
	}
	t := confirmAt
	next := func() time.Duration {
		t = min(t+g.uniform(200*time.Millisecond, spread/2), window)
		return t
	}
	left, seen := total, map[int64]bool{}
	for range partials {
		a := 1 + g.rng.Int64N(total/4) // three of them leave a quarter
		for seen[a] {
			a = 1 + g.rng.Int64N(total/4)
		}
		seen[a], left = true, left-a
		g.addTBank(i, tbank.StatusPartialRefunded, pay, a, "", roleRefund, next())
		st.PartialRefunds++
	}
	if full {
		g.addTBank(i, tbank.StatusRefunded, pay, left, "", roleRefund, next())
		st.FullRefunds++
	}
}

// addTBank plans one notification of order i, signed with fakebank's
// NoticeBody, its PaymentId spelled one way at random in body and the
// other way in alt. Its id is the service's dedup key,
// TerminalKey:PaymentId:Status, plus :Amount for PARTIAL_REFUNDED.
func (g *generator) addTBank(i int, status, payment string, amount int64, errorCode, role string, at time.Duration) {
	g.notice(i, fakebank.NoticeFields{TerminalKey: tbankTerminal, OrderID: g.w.orders[i].session(), PaymentID: payment,
		Status: status, Amount: amount, ErrorCode: errorCode, PaymentIDAsString: g.rng.IntN(2) == 0}, role, at)
	g.w.stats.TBank.Notifications++
}

// notice plans notification f of order i, its PaymentId spelled as f says
// in body and the other way in alt, and returns it.
func (g *generator) notice(i int, f fakebank.NoticeFields, role string, at time.Duration) *eventPlan {
	body := fakebank.NoticeBody(f, g.w.tbankPassword)
	f.PaymentIDAsString = !f.PaymentIDAsString
	id := tbankTerminal + ":" + f.PaymentID + ":" + f.Status
	if f.Status == tbank.StatusPartialRefunded {
		id += ":" + strconv.FormatInt(f.Amount, 10)
	}
	e := &eventPlan{id: id, order: i, typ: f.Status, endpoint: tbankEP, payment: f.PaymentID,
		role: role, at: at, body: body, alt: fakebank.NoticeBody(f, g.w.tbankPassword), amount: f.Amount}
	g.w.events = append(g.w.events, e)
	return e
}

// ofTBankOrder reports whether e is a notification of a T-Bank order (the
// T-Bank share of the report), not of a charged subscription's.
func (r *runner) ofTBankOrder(e *eventPlan) bool {
	return e.endpoint == tbankEP && e.order >= 0 && r.w.orders[e.order].tbank
}

// ledgerRow is one ledger movement.
type ledgerRow struct {
	line     int
	movement string
	minor    int64
	ref      string // a partial reversal's refund
}

func (l ledgerRow) String() string {
	s := fmt.Sprintf("line %d %s %d", l.line, l.movement, l.minor)
	if l.ref != "" {
		s += " for " + l.ref
	}
	return s
}

// replay is what the state machine makes of a T-Bank order's events, in
// the order they were applied: the order as Decide sees it, and the effects
// storage must have applied.
type replay struct {
	o      *orderPlan
	id     string // the order's id
	order  fulfillment.PaidOrder
	ledger []ledgerRow
	left   int64 // what is left of the credit
	// granted: licenses were granted; revoked: then revoked; announced:
	// order.fulfilled was published.
	granted, revoked, announced bool
	items                       map[string]int  // kind|event id → items due
	keys                        map[string]bool // their ItemKeys
}

func newReplay(o *orderPlan, orderID string) *replay {
	return &replay{o: o, id: orderID, items: map[string]int{}, keys: map[string]bool{},
		order: fulfillment.PaidOrder{State: fulfillment.StatePendingPayment, Total: fulfillment.Money{Currency: tbank.Currency, MinorUnits: o.total()}}}
}

// apply decides ev for the order and records the effects; it returns the
// decision.
func (rp *replay) apply(ev fulfillment.ProviderEvent) fulfillment.Decision {
	const creditLine = 1
	out := fulfillment.Decide(ev, &rp.order)
	for _, e := range out.Effects {
		switch e := e.(type) {
		case fulfillment.GrantLicenses:
			rp.granted = true
		case fulfillment.RevokeLicenses:
			rp.revoked = rp.granted
		case fulfillment.CreditBalances:
			if !slices.ContainsFunc(rp.ledger, func(l ledgerRow) bool { return l.movement == "credit" }) {
				rp.ledger = append(rp.ledger, ledgerRow{creditLine, "credit", rubCredit, ""})
				rp.left = rubCredit
			}
		case fulfillment.ReverseCreditShare:
			// The credit's share of the refund, rounded down, within what
			// is left; once per refund (taken when the refund is decided
			// after the credit, or when the credit is, after the refund).
			if share := min(rubCredit*e.Refunded.MinorUnits/rp.o.total(), rp.left); share > 0 {
				rp.ledger = append(rp.ledger, ledgerRow{creditLine, "partial_reversal", -share, e.Refund})
				rp.left -= share
			}
		case fulfillment.ReverseCredits:
			if rp.left > 0 {
				rp.ledger = append(rp.ledger, ledgerRow{creditLine, "refund_reversal", -rp.left, ""})
				rp.left = 0
			}
		case fulfillment.OpenItem:
			// One item per situation, as its key names it (a refund's: the
			// refund event).
			key := fulfillment.ItemKey(e.Kind, fulfillment.ItemSubject{Provider: ev.Provider, OrgID: ev.OrgID,
				Environment: ev.Environment, OrderID: rp.id, AttemptRef: ev.Payment.AttemptRef, PaymentID: ev.Payment.PaymentID,
				EventID: ev.EventID, Refund: fulfillment.ItemRefund(ev)})
			if !rp.keys[key] {
				rp.keys[key] = true
				rp.items[string(e.Kind)+"|"+ev.EventID]++
			}
		case fulfillment.Publish:
			rp.announced = rp.announced || e.Topic == fulfillment.TopicOrderFulfilled
		}
	}
	rp.order.Apply(ev, out)
	return out.Decision
}

// checkTBank holds every T-Bank order to the replay of its notifications:
// each decision the state machine's, in processing order; the order's state
// and payment; its licenses granted once and revoked exactly when the
// replay refunded it in full; its ledger — the credit once, each partial
// refund's share once, the full refund what is left, never below zero —
// and one refund_after_fulfillment item per refund that opened one.
func (r *runner) checkTBank(s *dbState) {
	byOrder := map[int]map[string]int{} // order → event id → event index
	for j, e := range r.w.events {
		if e.endpoint == tbankEP {
			if byOrder[e.order] == nil {
				byOrder[e.order] = map[string]int{}
			}
			byOrder[e.order][e.id] = j
		}
	}
	replayed := Check{Name: "T-Bank: decisions and state replay the state machine"}
	licenses := Check{Name: "T-Bank: licenses once, revoked exactly when fully refunded"}
	ledger := Check{Name: "T-Bank: credit once, refunds reversed once, never below 0"}
	items := Check{Name: "T-Bank: one refund_after_fulfillment item per refund"}
	// Refunds applied before their CONFIRMED (retries reorder them):
	// a full one leaves the order unpaid; a partial one takes its share
	// when the CONFIRMED credits the balance.
	earlyFull, earlyPartial, stale := 0, 0, 0
	st := &r.rep.TBank
	dup := func(n int) {
		r.rep.DuplicatedEffects += n
		st.Duplicated += n
	}
	r.fulfilledBefore = map[string]bool{}
	for i, o := range r.w.orders {
		if !o.tbank {
			continue
		}
		row, ok := s.orders[o.mid]
		replayed.Checked++
		if !ok {
			replayed.Failed++
			r.viol.add("missing order", "order %s does not exist", o.mid)
			continue
		}
		planned := maps.Clone(byOrder[i])
		rp := newReplay(o, row.id)
		ok = true
		for _, ev := range s.byOrder[row.id] {
			j, mine := planned[ev.eventID]
			if !mine {
				ok = false
				r.viol.add("misrouted event", "event %s is linked to order %s, which it is not about", ev.eventID, o.mid)
				continue
			}
			delete(planned, ev.eventID)
			e := r.w.events[j]
			pe, err := tbank.Parse(tbankEndpoint, tbankTerminal, e.body)
			if err != nil {
				ok = false
				r.viol.add("checker", "notification %s does not parse: %v", e.id, err)
				continue
			}
			if e.role == roleRefund && !rp.order.Paid {
				if e.typ == tbank.StatusPartialRefunded {
					earlyPartial++
				} else {
					earlyFull++
				}
			}
			want := rp.apply(pe)
			if e.typ == tbank.StatusAuthorized && want == fulfillment.DecisionStaleIgnored {
				stale++
			}
			if ev.decision != string(want) {
				ok = false
				r.viol.add("wrong decision", "order %s: notification %s (%s) decided %q, want %q at that point of the order's history",
					o.mid, e.id, e.role, ev.decision, want)
			}
		}
		for id, j := range planned {
			if r.snd.acked[j].Load() {
				ok = false
				r.viol.add("unlinked event", "order %s: acknowledged notification %s is not linked to it", o.mid, id)
			}
		}
		if !r.orderAsReplayed(s, o.mid, row, rp.order) {
			ok = false
		}
		if !ok {
			replayed.Failed++
		}
		if row.state == string(fulfillment.StateRefunded) {
			st.Refunded++
		}
		r.fulfilledBefore[o.mid] = rp.announced

		// Licenses: every unit once if granted, all revoked if refunded.
		licenses.Checked++
		wantN, wantRevoked := 0, 0
		if rp.granted {
			wantN = int(o.licenseQty)
		}
		if rp.revoked {
			wantRevoked = wantN
		}
		n := s.licenses[row.id]
		dup(max(0, n-wantN))
		if n != wantN || s.distinct[row.id] != n || s.revoked[row.id] != wantRevoked {
			licenses.Failed++
			r.viol.add("licenses", "order %s has %d licenses (%d distinct, %d revoked), want %d (%d revoked)",
				o.mid, n, s.distinct[row.id], s.revoked[row.id], wantN, wantRevoked)
		}

		// The ledger: exactly the movements replayed, the line never below
		// zero, at zero once refunded in full.
		ledger.Checked++
		var sum int64
		var got, want []string
		for _, l := range s.entries[row.id] {
			got, sum = append(got, l.String()), sum+l.minor
		}
		for _, l := range rp.ledger {
			want = append(want, l.String())
		}
		slices.Sort(got)
		slices.Sort(want)
		dup(max(0, len(got)-len(want)))
		if !slices.Equal(got, want) || sum < 0 || (rp.revoked && sum != 0) {
			ledger.Failed++
			r.viol.add("ledger", "order %s: movements %v (sum %d), want %v", o.mid, got, sum, want)
		}

		// Items: one per refund that opened one, open, and no other.
		items.Checked++
		gotItems := map[string]int{}
		for _, it := range s.items {
			switch {
			case it.orderID != row.id:
			case it.messageID == 0 && it.state == "open":
				gotItems[it.kind+"|"+s.eventIDs[it.inboxID]]++
			default:
				gotItems[it.kind+"/"+it.state]++
			}
		}
		for k, n := range gotItems {
			dup(max(0, n-rp.items[k]))
		}
		if !maps.Equal(gotItems, rp.items) {
			items.Failed++
			r.viol.add("refund items", "order %s: items %v, want %v", o.mid, truncMap(gotItems), truncMap(rp.items))
		}
	}
	r.addCheck(replayed)
	r.addCheck(licenses)
	r.addCheck(ledger)
	r.addCheck(items)
	r.logf("T-Bank: %d AUTHORIZED ignored as stale after their CONFIRMED; applied before their CONFIRMED: %d REFUNDED "+
		"(order left unpaid), %d PARTIAL_REFUNDED (their shares taken when the CONFIRMED credited)",
		stale, earlyFull, earlyPartial)
}

// orderAsReplayed holds the stored order row (merchant order id mid) to
// the order its replay left: state, the payment that paid it, its
// attempts. It reports a violation for the first difference.
func (r *runner) orderAsReplayed(s *dbState, mid string, row orderRow, want fulfillment.PaidOrder) bool {
	attempts := map[string]string{}
	for k, a := range want.Attempts {
		attempts[k.Ref] = string(a)
	}
	switch {
	case row.state != string(want.State):
		r.viol.add("order state", "order %s is %s, want %s", mid, row.state, want.State)
	case row.paidAttempt != want.PaidBy.AttemptRef || row.paidPayID != want.PaidBy.PaymentID:
		r.viol.add("paid by", "order %s is recorded paid by %s/%s, want %s/%s",
			mid, row.paidAttempt, row.paidPayID, want.PaidBy.AttemptRef, want.PaidBy.PaymentID)
	case !maps.Equal(s.attempts[row.id], attempts):
		r.viol.add("payment attempts", "order %s: attempts %v, want %v", mid, s.attempts[row.id], attempts)
	default:
		return true
	}
	return false
}
