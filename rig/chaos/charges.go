package chaos

// The charged subscriptions of a run: a quarter of the T-Bank orders are
// instead a T-Bank subscription, registered (CreateSubscription) before
// the send phase under its card binding, and paid by the bank's recurrent
// charges — CONFIRMED notifications naming the binding (RebillId) and a
// checkout of their own that no order has — through the same retrying
// sender, under the same kills and outages. Half the charges are refunded
// in full (a fifth of those partly first), each refund delivered twice at
// least: a third of the refunds after their charge is processed, a third
// before the charge is sent (decided unmatched; the charge's transaction
// must queue them again, under the payment's late-match lock), a third at
// the same moment as the charge (the race that lock closes). Most refunds
// name no binding, as the bank notifies them: the service finds the
// subscription by the period the charge paid.
//
// A registered subscription starts with no period, so its first charge
// pays a period that begins at once, and a refund of it received later
// ends access at the refund (one subscription.access_ended, one
// refund_after_fulfillment item). The notifications carry no date: the
// rules take each one's receipt, which the check reads from the inbox. No
// access runs out during the run (the monthly plan), so the sweeper has no
// part in these stories.
//
// The check (checkSubscriptions, with checkCharges) replays the charges
// and refunds in processing order through the subscription rules and
// holds the database to the result, then counts, per charge, what a
// refund leaves: the period marked refunded exactly when the rules
// refunded it, its refund_after_fulfillment items, and no refund left
// unmatched whose charge paid a period.

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

// rubPeriod is what a charge of a charged subscription takes, in kopecks.
const rubPeriod = 99000

// How a charge's refunds are delivered relative to the charge.
const (
	refundAfter  = iota // once the charge is applied
	refundFirst         // before the charge is sent: decided unmatched, queued again by the charge
	refundRacing        // at the same moment as the charge
)

// bindingID is the card binding (RebillId) of charged subscription i,
// chargeID the bank's PaymentId of its n-th charge.
func bindingID(i int) string   { return strconv.Itoa(9_000_000_000 + i) }
func chargeID(i, n int) string { return strconv.Itoa(8_000_000_000 + 10*i + n) }

// registerCharged makes T-Bank order o (index i) a charged subscription:
// no order, a subscription of the monthly plan registered under its card
// binding, paid by 1 to 3 charges.
func (g *generator) registerCharged(o *orderPlan, i int) {
	sp := &subPlan{id: bindingID(i), customer: "cust_" + o.mid, cfg: planMonthly, story: storyActive, tbank: true,
		periods: 1 + g.rng.IntN(3)}
	sp.plan = sp.cfg.Domain()
	o.tbank, o.sub, o.licenseQty, o.credit, o.external = false, sp, 0, false, nil
}

// registration is the CreateSubscription request of a charged
// subscription; repeating it is idempotent.
func (sp *subPlan) registration() *fulfillmentv1.CreateSubscriptionRequest {
	provider := fulfillment.ProviderTBank
	if !sp.tbank {
		provider = fulfillment.ProviderYolfi // late_first.go
	}
	return &fulfillmentv1.CreateSubscriptionRequest{OrgId: orgID, Environment: "live", Provider: string(provider),
		ProviderSubscriptionId: sp.id, CustomerRef: sp.customer, PlanId: sp.cfg.ID}
}

// planCharges plans the notifications of charged subscription i, whose
// story starts at start in the send window: each charge, and for half of
// them its refunds, delivered after, before or with it.
func (g *generator) planCharges(i int, start, spread, window time.Duration) {
	o, st := g.w.orders[i], &g.w.stats.Subscriptions
	sp := o.sub
	st.Registered++
	t0 := start + g.uniform(0, spread/4)
	later := func(t time.Duration) time.Duration { return min(t+g.uniform(200*time.Millisecond, spread/2), window) }
	for n := 1; n <= sp.periods; n++ {
		pay, session := chargeID(i, n), fmt.Sprintf("%s-c%d", o.mid, n)
		at := min(t0+g.uniform(0, spread/2), window)
		st.Charges++
		if g.rng.IntN(2) == 0 {
			g.addCharge(i, tbank.StatusConfirmed, pay, session, rubPeriod, true, roleRenewal, at, nil)
			continue
		}
		// Its refunds: a fifth of them partial first, then the rest; most
		// name no binding, as the bank notifies a refund.
		type refund struct {
			status string
			amount int64
		}
		var refunds []refund
		left := int64(rubPeriod)
		if g.rng.Float64() < 0.2 {
			a := 1 + g.rng.Int64N(rubPeriod/4)
			refunds, left = append(refunds, refund{tbank.StatusPartialRefunded, a}), left-a
		}
		refunds = append(refunds, refund{tbank.StatusRefunded, left})
		named := g.rng.IntN(3) == 0
		how := g.rng.IntN(3)
		if st.RefundedCharges == 0 {
			how = refundFirst // every run has one, however short
		}
		st.RefundedCharges++
		addRefunds := func(at time.Duration, after []int) []int {
			var idx []int
			for _, r := range refunds {
				idx = append(idx, g.addCharge(i, r.status, pay, session, r.amount, named, roleRefund, at, after))
				st.ChargeRefunds++
				st.PartialChargeRefunds += btoi(r.status == tbank.StatusPartialRefunded)
				at = later(at)
			}
			return idx
		}
		switch how {
		case refundAfter:
			c := g.addCharge(i, tbank.StatusConfirmed, pay, session, rubPeriod, true, roleRenewal, at, nil)
			addRefunds(later(at), []int{c})
		case refundFirst:
			first := addRefunds(at, nil)
			for _, j := range first {
				g.w.events[j].early = true
				st.RefundsFirst++
			}
			c := g.addCharge(i, tbank.StatusConfirmed, pay, session, rubPeriod, true, roleRenewal, later(at), first)
			g.w.events[c].afterDecided = true
		case refundRacing:
			g.addCharge(i, tbank.StatusConfirmed, pay, session, rubPeriod, true, roleRenewal, at, nil)
			st.RefundsRacing += len(addRefunds(at, nil))
		}
	}
}

// addCharge plans one notification of charged subscription i about
// payment (of checkout session), naming its card binding when named, and
// returns its index; it is first delivered at at, once the events after
// are processed. Its bodies spell PaymentId (and RebillId) one way and
// the other, as addTBank's.
func (g *generator) addCharge(i int, status, payment, session string, amount int64, named bool, role string, at time.Duration, after []int) int {
	f := fakebank.NoticeFields{TerminalKey: tbankTerminal, OrderID: session, PaymentID: payment, Status: status, Amount: amount,
		PaymentIDAsString: g.rng.IntN(2) == 0}
	if named {
		f.RebillID = g.w.orders[i].sub.id
	}
	e := g.notice(i, f, role, at)
	e.after = slices.Clone(after)
	g.w.stats.Subscriptions.Events++
	return len(g.w.events) - 1
}

// applyCharge decides ev, a notification about charged subscription rp,
// received at received, the way the inbox routes it when no order matches
// it: one naming the subscription's binding is the subscription rules';
// a refund naming none is too when a period of it is paid by the refunded
// payment, and otherwise waits for that payment, unmatched.
func (rp *subReplay) applyCharge(ev fulfillment.ProviderEvent, received time.Time) subStep {
	if ev.Payment.SubscriptionID == "" && !rp.paidBy(ev.Payment.PaymentID) {
		return subStep{decision: fulfillment.DecisionUnmatched}
	}
	return subStep{decision: rp.decide(ev, received, false).Decision, sub: true}
}

// paidBy reports whether payment paid a period of the subscription.
func (rp *subReplay) paidBy(payment string) bool {
	for _, r := range rp.sub.Renewals {
		if r.PaymentID == payment {
			return true
		}
	}
	return false
}

// refundedKeys are the keys of the periods the rules have marked
// refunded.
func (rp *subReplay) refundedKeys() []string {
	var keys []string
	for k, r := range rp.sub.Renewals {
		if r.Refunded {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// chargeCheck is what checkCharges holds one charged subscription to.
type chargeCheck struct {
	rp  *subReplay
	seq []inboxRow // its events as stored, in processing order
	// refunded are the keys of its periods marked refunded (refunded_at);
	// paid holds the payments that paid its periods.
	refunded []string
	paid     map[string]bool
	// items are its refund items (refund_after_fulfillment,
	// refund_not_applicable) by payment.
	items map[string]int
}

// checkCharges holds one charged subscription's refunds to the rules, by
// counting rows: each period marked refunded exactly when the rules
// refunded it (a mark missing is lost, one too many duplicated); no refund
// left unmatched whose charge paid a period (lost: nothing will queue it
// again); its refund items, per charge, as many as the rules open (counted
// with the subscription's items already, reported here by charge). It
// returns what it found lost and duplicated, and the diffs.
func (r *runner) checkCharges(c chargeCheck, events map[string]*eventPlan) (lost, dup int, diffs []string) {
	st := &r.rep.Subscriptions
	want := c.rp.refundedKeys()
	l, d := countDiff(counts(want), counts(c.refunded))
	lost, dup = lost+l, dup+d
	if l+d > 0 {
		diffs = append(diffs, fmt.Sprintf("periods marked refunded %v, want %v", c.refunded, want))
	}
	st.RefundedPeriods += len(c.refunded)
	for _, ev := range c.seq {
		e := events[ev.eventID]
		if e == nil || e.role != roleRefund {
			continue
		}
		switch {
		case ev.state == "unmatched" && c.paid[e.payment]:
			lost++
			diffs = append(diffs, fmt.Sprintf("refund %s is left unmatched, though its charge paid a period", e.id))
		case ev.decision == string(fulfillment.DecisionSubscriptionRefunded) || ev.decision == string(fulfillment.DecisionPartiallyRefunded):
			st.RefundsApplied++
			st.RefundsRequeued += btoi(ev.lateMatched)
		}
	}
	l, d = countDiff(c.rp.chargeItems, c.items)
	st.ChargeLost, st.ChargeDuplicated = st.ChargeLost+lost+l, st.ChargeDuplicated+dup+d
	if l+d > 0 {
		diffs = append(diffs, fmt.Sprintf("refund items by charge %s, want %s", truncMap(c.items), truncMap(c.rp.chargeItems)))
	}
	return lost, dup, diffs
}

// counts counts each of keys.
func counts(keys []string) map[string]int {
	m := map[string]int{}
	for _, k := range keys {
		m[k]++
	}
	return m
}

// refundItem reports whether kind is the item a refund opens.
func refundItem(kind string) bool { return kind == itemRefund || kind == itemRefundNotApplicable }
