package chaos

// The replay model of the subscription check: what the pure rules make of one
// subscription order's events, parsed from the bytes sent, and how the stored
// subscription is held to it.

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// subReplay is what the rules make of one subscription order's events, in
// the order they were applied: the order and the subscription as the rules
// see them, and the effects storage must have applied.
type subReplay struct {
	sp  *subPlan
	mid string
	// order is the order as Decide sees it; exists: the first payment
	// created the subscription (the inbox knows it from then on).
	order  fulfillment.PaidOrder
	exists bool
	sub    fulfillment.Subscription
	// The effects: periods granted, events published (topic|period), items
	// opened (kind|event id) — each once; an item about a payment (not a
	// refund) once per kind and payment, under the event that opened it
	// (itemOf: kind|payment id → that key).
	periods []subPeriodRow
	topics  map[string]int
	items   map[string]int
	itemOf  map[string]string
	// orderItems are the items the order rules opened for the order
	// (kind|event id), each once.
	orderItems map[string]int
	// chargeItems counts the refund items by the payment refunded
	// (checkCharges).
	chargeItems map[string]int
	// unmatched counts the unmatched_payment items of payments decided
	// before the subscription existed, by payment id.
	unmatched map[string]int
	swept     bool
	decisions map[string]int // subscription decisions, for the log
}

func newSubReplay(o *orderPlan) *subReplay {
	rp := &subReplay{sp: o.sub, mid: o.mid, topics: map[string]int{}, items: map[string]int{}, itemOf: map[string]string{},
		unmatched: map[string]int{}, chargeItems: map[string]int{}, orderItems: map[string]int{},
		decisions: map[string]int{},
		order: fulfillment.PaidOrder{State: fulfillment.StatePendingPayment, HasSubscriptionLines: true,
			Total:      fulfillment.Money{Currency: "USD", MinorUnits: subMinor},
			Settlement: &fulfillment.Settlement{Token: payToken, Network: payNetwork, Amount: decimal.RequireFromString(payAmount)}}}
	if o.sub.tbank {
		// Registered before its events: active, with no period paid.
		rp.exists, rp.sub.State = true, fulfillment.SubActive
	}
	return rp
}

// subStep is what processing one event did: its decision, and whether it
// is linked to the order and applied to the subscription.
type subStep struct {
	decision   fulfillment.Decision
	order, sub bool
}

// apply decides ev, received at received, the way the inbox does: a
// lifecycle event naming the known subscription is the subscription
// rules', whatever order it names, and unmatched before the subscription
// exists; so is a confirmed payment that names the known subscription and
// the paid order, and is told apart from the payment that paid the order
// (renews): a renewal, the order untouched; any other event no order
// matches that names the known subscription is the subscription rules'
// too; what matches the order is the state machine's, and the payment
// that pays it pays a period of the subscription (created by it) as a
// purchase.
func (rp *subReplay) apply(ev fulfillment.ProviderEvent, received time.Time) subStep {
	ev.OccurredAt = fulfillment.PlausibleOccurrence(ev.OccurredAt, received)
	matched := ev.Payment.MerchantOrderID == rp.mid && !ev.TestMode
	lifecycle := fulfillment.ForSubscription(ev) &&
		(ev.Kind == fulfillment.EventSubscriptionOverdue || ev.Kind == fulfillment.EventSubscriptionCancelled)
	switch {
	case (!matched || lifecycle || rp.renews(ev, received)) && rp.exists && fulfillment.ForSubscription(ev):
		return subStep{decision: rp.decide(ev, received, false).Decision, sub: true}
	case lifecycle:
		return subStep{decision: fulfillment.DecisionUnmatched}
	}
	var view *fulfillment.PaidOrder
	if matched {
		view = &rp.order
	}
	out := fulfillment.Decide(ev, view)
	step := subStep{decision: out.Decision, order: matched}
	if slices.Contains(out.Effects, fulfillment.Effect(fulfillment.PaySubscriptions{})) {
		rp.exists, step.sub = true, true
		rp.decide(ev, received, true)
	}
	if !matched && slices.Contains(out.Effects, fulfillment.Effect(fulfillment.OpenItem{Kind: fulfillment.ReconUnmatchedPayment})) {
		rp.unmatched[ev.Payment.PaymentID]++
	}
	if matched {
		rp.order.Apply(ev, out)
		for _, e := range out.Effects {
			if it, ok := e.(fulfillment.OpenItem); ok {
				rp.orderItems[string(it.Kind)+"|"+ev.EventID] = 1
			}
		}
	}
	return step
}

// renews reports whether ev, naming the order, is about a renewal of the
// subscription the order's payment paid: a confirmed payment, or its
// invoice's creation, expiry or cancellation; the order paid — by the
// payment that created the subscription, the only one it pays a period
// of — ev naming no checkout session and no attempt the order recorded,
// and ev's payment told apart from the order's (an invoice's event: of
// another attempt and invoice than the ones that paid the order, and, when
// that payment named no invoice, after it).
func (rp *subReplay) renews(ev fulfillment.ProviderEvent, received time.Time) bool {
	if !rp.order.Paid || !rp.exists || ev.Payment.SubscriptionID != rp.sp.id {
		return false
	}
	switch ev.Kind {
	case fulfillment.EventPaymentConfirmed, fulfillment.EventAttemptCreated, fulfillment.EventAttemptExpired, fulfillment.EventAttemptCancelled:
	default:
		return false
	}
	if ev.Payment.CheckoutSessionID != "" {
		return false
	}
	if _, recorded := rp.order.Attempts[fulfillment.AttemptKey{Provider: ev.Provider, Ref: ev.Payment.AttemptRef}]; recorded {
		return false
	}
	if ev.Kind != fulfillment.EventPaymentConfirmed {
		by := rp.order.PaidBy
		if ev.Payment.AttemptRef == "" || ev.Payment.AttemptRef == by.AttemptRef {
			return false
		}
		if by.InvoiceID != "" {
			return ev.Payment.InvoiceID != by.InvoiceID
		}
		for _, r := range rp.sub.Renewals {
			if by.PaymentID != "" && r.PaymentID == by.PaymentID {
				return !r.PaidAt.IsZero() && fulfillment.SubscriptionEventOf(ev, received).OccurredAt.After(r.PaidAt)
			}
		}
		return false
	}
	same, known := rp.order.PaidBy.SamePayment(ev.Payment)
	return known && !same
}

// decide applies ev to the subscription under its rules.
func (rp *subReplay) decide(ev fulfillment.ProviderEvent, received time.Time, purchase bool) fulfillment.Outcome {
	sev := fulfillment.SubscriptionEventOf(ev, received)
	sev.Purchase = purchase
	out := fulfillment.DecideSubscription(sev, rp.sub, rp.sp.plan)
	rp.record(sev, out, ev.EventID)
	return out
}

// record applies out, the decision of sev (about event eventRef), and
// records its effects: as storage does, an event is published for the
// period the decision leaves.
func (rp *subReplay) record(sev fulfillment.SubscriptionEvent, out fulfillment.Outcome, eventRef string) {
	rp.sub.Apply(sev, out)
	rp.decisions[string(out.Decision)]++
	for _, e := range out.Effects {
		switch e := e.(type) {
		case fulfillment.GrantPeriod:
			rp.periods = append(rp.periods, subPeriodRow{period: e.Period, key: sev.PeriodKey(), payment: sev.PaymentID, start: e.Start, end: e.End})
		case fulfillment.Publish:
			rp.topics[topicKey(string(e.Topic), rp.sub.Periods)] = 1
		case fulfillment.OpenItem:
			refund := e.Kind == fulfillment.ReconRefundAfterFulfill || e.Kind == fulfillment.ReconRefundNotApplicable
			if sev.PaymentID != "" && !refund {
				k := string(e.Kind) + "|" + sev.PaymentID
				if _, opened := rp.itemOf[k]; opened {
					continue // the item of that payment, opened by an earlier event
				}
				rp.itemOf[k] = eventRef
			}
			rp.items[string(e.Kind)+"|"+eventRef] = 1
			if refund {
				rp.chargeItems[sev.PaymentID]++
			}
		case fulfillment.OpenChargeItem:
			// About a charge applied before (never a refund's): one item
			// per payment, so an event may open several.
			k := string(e.Kind) + "|" + e.PaymentID
			if _, opened := rp.itemOf[k]; !opened {
				rp.itemOf[k] = eventRef
				rp.items[string(e.Kind)+"|"+eventRef]++
			}
		}
	}
}

// sweep is the sweeper at now, after the last event.
func (rp *subReplay) sweep(now time.Time) {
	if out, ok := fulfillment.SweepSubscription(rp.sub, rp.sp.plan, now); ok {
		rp.swept = true
		rp.record(fulfillment.SubscriptionEvent{OccurredAt: now}, out, "sweep")
	}
}

// subDB is one subscription as stored: nil row when there is none.
type subDB struct {
	row     *subRow
	periods []subPeriodRow
	events  map[string]int // topic|period → rows
	items   map[string]int // kind|event id → items (kind/state|event id when not open)
}

// compareSubscription holds db to the replay: lost counts the effects the
// rules require that are missing (a period, an event of a period, an
// item), dup those beyond them (one more row of a period's bill or of a
// topic and period, an item or a period no rule grants); diffs say what
// differs, including the subscription's own state.
func compareSubscription(rp *subReplay, db subDB) (lost, dup int, diffs []string) {
	switch {
	case db.row == nil && rp.exists:
		diffs = append(diffs, "the subscription is not stored")
	case db.row != nil && !rp.exists:
		diffs = append(diffs, "the subscription is stored, but no payment of it was applied")
	case db.row != nil:
		row := db.row
		want := fmt.Sprintf("%s with %d periods to %s, access ended %v, customer %s, plan %s", rp.sub.State, rp.sub.Periods,
			rp.sub.PeriodEnd.UTC().Format(time.RFC3339), rp.sub.AccessEnded, rp.sp.customer, rp.sp.cfg.ID)
		got := fmt.Sprintf("%s with %d periods to %s, access ended %v, customer %s, plan %s", row.state, row.periods,
			row.periodEnd.UTC().Format(time.RFC3339), row.accessEnded, row.customer, row.plan)
		if got != want {
			diffs = append(diffs, fmt.Sprintf("it is %s, want %s", got, want))
		}
		// The sweeper stamps its own moment; an event's is the replay's.
		if !rp.swept && !row.lastEventAt.Equal(rp.sub.LastEventAt) {
			diffs = append(diffs, fmt.Sprintf("its newest event is dated %s, want %s", row.lastEventAt.UTC(), rp.sub.LastEventAt.UTC()))
		}
		if !row.cancelledAt.Equal(rp.sub.CancelledAt) {
			diffs = append(diffs, fmt.Sprintf("its cancellation is kept at %s, want %s", row.cancelledAt.UTC(), rp.sub.CancelledAt.UTC()))
		}
	}
	want := map[string]subPeriodRow{}
	for _, p := range rp.periods {
		want[p.key] = p
	}
	got := map[string][]subPeriodRow{}
	for _, p := range db.periods {
		got[p.key] = append(got[p.key], p)
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		switch rows := got[k]; {
		case len(rows) == 0:
			lost++
			diffs = append(diffs, fmt.Sprintf("period %s is missing", want[k]))
		default:
			dup += len(rows) - 1
			if len(rows) > 1 || rows[0].String() != want[k].String() {
				diffs = append(diffs, fmt.Sprintf("bill %s paid %v, want %s", k, rows, want[k]))
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			dup += len(got[k])
			diffs = append(diffs, fmt.Sprintf("period %v is paid by no bill the rules paid", got[k]))
		}
	}
	for _, c := range []struct {
		what      string
		want, got map[string]int
	}{{"events", rp.topics, db.events}, {"items", rp.items, db.items}} {
		l, d := countDiff(c.want, c.got)
		lost, dup = lost+l, dup+d
		if l+d > 0 {
			diffs = append(diffs, fmt.Sprintf("%s %s, want %s", c.what, truncMap(c.got), truncMap(c.want)))
		}
	}
	return lost, dup, diffs
}

// countDiff counts what want has and got lacks (lost), and what got has
// beyond want (dup).
func countDiff(want, got map[string]int) (lost, dup int) {
	for k, n := range want {
		lost += max(0, n-got[k])
	}
	for k, n := range got {
		dup += max(0, n-want[k])
	}
	return lost, dup
}

// yolfiLive is the live Yolfi endpoint as the service knows it: the
// checker parses what it sent the way the service does.
var yolfiLive = fulfillment.Endpoint{ID: liveEP, Provider: fulfillment.ProviderYolfi, OrgID: orgID, Environment: fulfillment.EnvLive}

// parseEvent parses a planned event from its bytes, as the webhook
// gateway of its endpoint does.
func parseEvent(e *eventPlan) (fulfillment.ProviderEvent, error) {
	if e.endpoint == tbankEP {
		return tbank.Parse(tbankEndpoint, tbankTerminal, e.body)
	}
	return parseYolfi(e)
}

// parseYolfi parses a planned Yolfi event from its bytes, as the webhook
// gateway does.
func parseYolfi(e *eventPlan) (fulfillment.ProviderEvent, error) {
	h := http.Header{}
	h.Set(yolfi.EventIDHeader, e.id)
	return yolfi.Parse(yolfiLive, h, e.body)
}
