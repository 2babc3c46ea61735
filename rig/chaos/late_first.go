package chaos

// Orders created after their first payment (docs/subscriptions.md, "An
// order created after its payment"): one Yolfi order in thirty (and, however
// short the run, two that fit, one of another amount, one license-only) is
// instead a subscription of the monthly plan,
// registered (CreateSubscription) before the send phase, whose first
// payment — a payment.confirmed naming the subscription and the merchant
// order id, which no order has yet — is delivered twice at least (a third
// of the copies at the same moment), under the same kills and outages.
// The subscription takes it as its first period (renewed). The merchant
// then creates the order, late:
//
//   - lateFit: a subscription line for the subscription's plan and
//     customer, and a license line, for the payment's amount. Its creation
//     queues the payment again and the order claims it: paid and fulfilled
//     once (its licenses granted once), no second period, no item. Half of
//     these orders are created once the payment is decided, the other half
//     as soon as its first copy is acknowledged, while the service may be
//     deciding it (the race the late-match lock closes): the payment then
//     pays the order either way.
//   - lateOtherPrice: the same lines for another amount, created once the
//     payment is decided: the order stays unpaid, with one amount_mismatch
//     item; the period stays paid.
//   - lateLicenseOnly: a license line alone, same merchant order id,
//     created once the payment is decided: the payment stays the
//     subscription's (already_applied for the order, which the stored
//     event does not show: found applied, it keeps its decision, renewed):
//     the order unpaid, no license, no item.
//
// Yolfi sends no refund event, so none of these payments is refunded.
//
// The check (checkLateFirst) counts rows per story: the order's state and
// paying payment, its licenses and ledger entries, the subscription's
// periods and who paid them, its events, the items naming the order or
// the subscription, and the payment's decision.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// How the late order of a registered subscription's first payment goes
// (subPlan.lateOrder).
const (
	lateNone        = iota // not such a story
	lateFit                // its subscription line and the payment's amount: claims the payment
	lateOtherPrice         // its subscription line, another amount: unpaid, amount_mismatch
	lateLicenseOnly        // a license line alone: takes nothing of the payment
)

// otherAmount is the settlement of a lateOtherPrice order, which the
// payment (payAmount) does not fit.
const otherAmount = "30.000000"

// registerLateFirst makes order o a registered subscription whose first
// payment comes before the order, created late as kind says.
func (g *generator) registerLateFirst(o *orderPlan, kind int) {
	st := &g.w.stats.LateFirst
	sp := &subPlan{id: "ysub_" + o.mid, customer: "cust_" + o.mid, cfg: planMonthly, story: storyActive, periods: 1, lateOrder: kind}
	sp.plan = sp.cfg.Domain()
	o.sub, o.credit, o.external, o.late = sp, false, nil, true
	st.Stories++
	switch kind {
	case lateFit:
		o.racing = st.Fit%2 == 1
		st.Fit++
		st.Racing += btoi(o.racing)
	case lateOtherPrice:
		st.OtherPrice++
	case lateLicenseOnly:
		st.LicenseOnly++
	}
}

// pickLateFirst picks how a story's late order goes: most fit.
func (g *generator) pickLateFirst() int {
	switch x := g.rng.IntN(10); {
	case x < 6:
		return lateFit
	case x < 8:
		return lateOtherPrice
	default:
		return lateLicenseOnly
	}
}

// lateFirstRequest is the CreateOrder request of the late order of such a
// story.
func (o *orderPlan) lateFirstRequest() *fulfillmentv1.CreateOrderRequest {
	sp := o.sub
	subLine := &fulfillmentv1.OrderLine{
		Sku: subSKU + sp.cfg.ID, Kind: string(fulfillment.KindSubscription), Quantity: 1, AccountRef: sp.customer,
		PlanId: sp.cfg.ID, UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: subMinor},
	}
	license := &fulfillmentv1.OrderLine{
		Sku: licenseSKU, Kind: "license", Quantity: o.licenseQty,
		UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: licensePart},
	}
	amount, lines := payAmount, []*fulfillmentv1.OrderLine{subLine, license}
	switch sp.lateOrder {
	case lateOtherPrice:
		amount = otherAmount
	case lateLicenseOnly:
		lines = lines[1:]
	}
	return &fulfillmentv1.CreateOrderRequest{
		OrgId: orgID, Environment: "live", MerchantOrderId: o.mid, Lines: lines,
		Settlement: &fulfillmentv1.Settlement{Token: payToken, Network: payNetwork, Amount: amount, Tolerance: "0"},
	}
}

// planLateFirst plans the first payment of story i, dated and first
// delivered at its start in the send window (its copies: planEvents).
func (g *generator) planLateFirst(i int, start, spread time.Duration) {
	o := g.w.orders[i]
	sp := o.sub
	at := start + g.uniform(0, spread/4)
	sp.start = g.base.Add(at).UTC().Truncate(time.Second)
	sp.first = g.addSub(i, yolfi.TypePaymentConfirmed, "inv_"+o.mid+"_f", "pay_"+o.mid+"_f", sp.start, true, roleFirst, at, nil)
	g.w.stats.LateFirst.Payments++
}

// lateFirstSub reports whether o is such a story.
func (o *orderPlan) lateFirstSub() bool { return o.sub != nil && o.sub.lateOrder != lateNone }

// LateFirstReport is what the run did with the orders created after their
// first payment (late_first.go).
type LateFirstReport struct {
	Stories     int // registered subscriptions whose first payment comes before its order
	Fit         int // of which the late order fits the payment
	Racing      int // of those, created as soon as the payment is acknowledged
	OtherPrice  int // late orders of another amount
	LicenseOnly int // late orders with a license line alone
	Payments    int // first payments planned
	// At the check: fitting orders that claimed their payment, of which
	// by the payment queued again (the others decided for the order at
	// once); what is missing and what is beyond (part of Lost and
	// DuplicatedEffects).
	Claimed, ClaimedLate int
	Lost, Duplicated     int
}

// checkLateFirst holds each story to the rules by counting its rows: see
// the overview above. It runs after checkSubscriptions (which leaves these
// subscriptions to it) and before checkItems and checkOutbox (it adds the
// subscription's message and excuses the items it counted).
func (r *runner) checkLateFirst(s *dbState) {
	c := Check{Name: "late first payments: the fitting order claims it once, no second period, others as the rules say"}
	st := &r.rep.LateFirst
	r.lateFirstOrders = map[string]bool{}
	for _, o := range r.w.orders {
		if !o.lateFirstSub() {
			continue
		}
		c.Checked++
		sp := o.sub
		e := r.w.events[sp.first]
		var diffs []string
		lost, dup := 0, 0
		orow, ok := s.orders[o.mid]
		if !ok {
			c.Failed++
			r.viol.add("missing order", "late order %s does not exist", o.mid)
			continue
		}
		r.lateFirstOrders[orow.id] = true
		srow, found := s.subs.rows[sp.id]
		if !found {
			lost++
			diffs = append(diffs, "its subscription is not stored")
		}
		subID := srow.id

		// The order.
		fit := sp.lateOrder == lateFit
		wantLicenses := 0
		if fit {
			wantLicenses = int(o.licenseQty)
			if orow.state != string(fulfillment.StateFulfilled) || orow.paidPayID != e.payment {
				lost++
				diffs = append(diffs, fmt.Sprintf("the order is %s paid by %q, want fulfilled by %s", orow.state, orow.paidPayID, e.payment))
			}
		} else if orow.state != string(fulfillment.StatePendingPayment) || orow.paidPayID != "" {
			dup++
			diffs = append(diffs, fmt.Sprintf("the order is %s paid by %q, want pending_payment, unpaid", orow.state, orow.paidPayID))
		}
		if n := s.licenses[orow.id]; n != wantLicenses {
			lost, dup = lost+max(0, wantLicenses-n), dup+max(0, n-wantLicenses)
			diffs = append(diffs, fmt.Sprintf("%d licenses, want %d", n, wantLicenses))
		}
		if n := s.ledger[orow.id]; n > 0 {
			dup += n
			diffs = append(diffs, fmt.Sprintf("%d ledger entries", n))
		}

		// The subscription: one period, paid by the payment, once.
		if found {
			if srow.state != string(fulfillment.SubActive) || srow.periods != 1 {
				diffs = append(diffs, fmt.Sprintf("the subscription is %s with %d periods, want active with 1", srow.state, srow.periods))
			}
			byPayment := 0
			for _, p := range s.subs.periods[subID] {
				if p.payment == e.payment {
					byPayment++
				} else {
					dup++
					diffs = append(diffs, fmt.Sprintf("period %s is paid by another payment", p))
				}
			}
			if byPayment != 1 {
				lost, dup = lost+max(0, 1-byPayment), dup+max(0, byPayment-1)
				diffs = append(diffs, fmt.Sprintf("%d periods paid by %s, want 1", byPayment, e.payment))
			}
			if n := len(s.subs.refunded[subID]); n > 0 {
				dup += n
				diffs = append(diffs, fmt.Sprintf("%d periods refunded", n))
			}
			renewed := topicKey(string(fulfillment.TopicSubscriptionRenewed), 1)
			l, d := countDiff(map[string]int{renewed: 1}, s.subs.events[subID])
			if l+d > 0 {
				lost, dup = lost+l, dup+d
				diffs = append(diffs, fmt.Sprintf("subscription events %s, want %s once", truncMap(s.subs.events[subID]), renewed))
			}
			for _, d := range r.dests {
				if slices.Contains(d.events, string(fulfillment.TopicSubscriptionRenewed)) {
					r.subMessages = append(r.subMessages, subMessage{d.id,
						fulfillment.SubscriptionEventKey(subID, fulfillment.TopicSubscriptionRenewed, 1), "subscription " + sp.id})
				}
			}
		}

		// Its items: one amount_mismatch for an order of another price,
		// none else (no extra_payment above all).
		want := map[string]int{}
		if sp.lateOrder == lateOtherPrice {
			want[itemAmountMismatch+"/open"] = 1
		}
		items := map[string]int{}
		for _, it := range s.items {
			if it.orderID == orow.id || (subID != "" && it.subscriptionID == subID) {
				items[it.kind+"/"+it.state]++
			}
		}
		if l, d := countDiff(want, items); l+d > 0 {
			lost, dup = lost+l, dup+d
			diffs = append(diffs, fmt.Sprintf("items %s, want %s", truncMap(items), truncMap(want)))
		}

		// The payment: stored once, decided for the order as the rules say,
		// the fitting order's recording the subscription too. Found
		// already_applied for the license-only order, it keeps the decision
		// it records (renewed: storage's decisions.queue).
		if rows := s.inbox[e.id]; len(rows) == 1 {
			ev := rows[0]
			wantDecision := map[int]fulfillment.Decision{lateFit: fulfillment.DecisionFulfilled,
				lateOtherPrice: fulfillment.DecisionAmountMismatch, lateLicenseOnly: fulfillment.DecisionRenewed}[sp.lateOrder]
			wantSub := pick(fit, subID, "")
			if ev.decision != string(wantDecision) || ev.orderID != orow.id || ev.subID != wantSub || (!o.racing && !ev.lateMatched) {
				diffs = append(diffs, fmt.Sprintf("its payment %s is decided %q for order %q, subscription %q (queued again: %v), want %q for %s, subscription %q (queued again: %v)",
					e.id, ev.decision, ev.orderID, ev.subID, ev.lateMatched, wantDecision, orow.id, wantSub, !o.racing))
			}
			if fit && ev.decision == string(wantDecision) && ev.orderID == orow.id && orow.state == string(fulfillment.StateFulfilled) {
				st.Claimed++
				st.ClaimedLate += btoi(ev.lateMatched)
			}
		}

		st.Lost, st.Duplicated = st.Lost+lost, st.Duplicated+dup
		r.rep.Lost, r.rep.DuplicatedEffects = r.rep.Lost+lost, r.rep.DuplicatedEffects+dup
		if len(diffs) > 0 {
			c.Failed++
			r.viol.add("late first payment", "order %s (%s, racing %v), subscription %s: %s (%d lost, %d duplicated)",
				o.mid, lateKindName(sp.lateOrder), o.racing, sp.id, strings.Join(diffs, "; "), lost, dup)
		}
	}
	r.addCheck(c)
	r.logf("late first payments: %d registered subscriptions paid before their order (%d orders fit, %d of them racing; %d of another price, %d license only); %d orders claimed their payment (%d queued again)",
		st.Stories, st.Fit, st.Racing, st.OtherPrice, st.LicenseOnly, st.Claimed, st.ClaimedLate)
}

func lateKindName(k int) string {
	return [...]string{"none", "fits", "another price", "license only"}[k]
}
