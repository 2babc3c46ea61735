package chaos

// The subscription side of a run: one Yolfi order in eight buys a period
// of a subscription (one "subscription" line naming a configured plan),
// paid by a payment.confirmed that names both the order and the
// subscription; the subscription then lives on events of its own, through
// the same retrying sender, under the same kills and outages: renewals
// (payment.confirmed without an order, one invoice and payment per period,
// dated a period apart) delivered twice at least, some announced again
// under another event id, some at the same moment, out of order; second
// payments of a paid renewal invoice; subscription.overdue and
// subscription.cancelled dated between the renewals, stale or not; and
// invoice.overdue of renewal invoices already paid.
//
// Every story is dated in the past (or a few hours ahead, which the
// service believes), so that some subscriptions' access is over by the
// time of the check: the sweeper of the processes being killed must end it,
// exactly once. For the check to know what the rules say, nothing may
// leave the sweeper a choice of moment: a subscription's renewals are sent
// once its first payment is processed (as a provider renews a period
// later), a cancellation that leaves no access once the renewals it must
// follow are processed, and no access runs out before the story's last
// event — which the workload's dates ensure (see planSubscription), and
// the check verifies.
//
// The check replays each subscription's events in processing order
// through the pure rules — the order's state machine (fulfillment.Decide)
// for what matches the order, its PaySubscriptions effect for the first
// period, DecideSubscription for the rest, on the events the Yolfi adapter
// parses from the very bytes sent — then SweepSubscription at the check's
// time, and holds the database to the result: the subscription's state,
// its periods (one per bill), its events in the feed and the outbox (one
// per topic and period), its extra_payment items, and each event's
// decision and links.

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// The run's plans. The monthly plan's long grace keeps every subscription
// that is not cancelled in access while its story is told (its first period
// ended up to three months ago); the weekly plan's short one runs out
// during the run for the subscriptions made to lapse.
var (
	planMonthly = config.Plan{ID: "chaos-monthly", Months: 1, Grace: ptr(80 * 24 * time.Hour)}
	planWeekly  = config.Plan{ID: "chaos-weekly", Days: 7, Grace: ptr(36 * time.Hour)}
)

// sweepQueue is the sweeper's configuration: it looks for due sweeps
// often, and retries quickly, so that access ends within the run.
var sweepQueue = config.Queue{Workers: 2, Batch: 16, Lease: 2 * time.Second, Poll: 200 * time.Millisecond,
	BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, MaxAttempts: 50}

// subTopics are the subscription events, which the idempotent destination
// receives.
var subTopics = []string{string(fulfillment.TopicSubscriptionRenewed), string(fulfillment.TopicSubscriptionPastDue),
	string(fulfillment.TopicSubscriptionAccessEnded)}

const (
	subSKU   = "chaos-sub-"
	subMinor = 2500 // the price of a period, in US cents (paid as payAmount USDT)
	// aheadMargin is how far past the start of the send phase the check
	// may come: a period ending later still grants access then.
	aheadMargin = time.Hour
)

// yolfiLive is the live Yolfi endpoint as the service knows it: the
// checker parses what it sent the way the service does.
var yolfiLive = fulfillment.Endpoint{ID: liveEP, Provider: fulfillment.ProviderYolfi, OrgID: orgID, Environment: fulfillment.EnvLive}

// subOf is the subscription of event e's order, nil for none.
func (r *runner) subOf(e *eventPlan) *subPlan {
	if e.order < 0 {
		return nil
	}
	return r.w.orders[e.order].sub
}

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
	// opened (kind|event id) — each once.
	periods []subPeriodRow
	topics  map[string]int
	items   map[string]int
	// unmatched counts the unmatched_payment items of payments decided
	// before the subscription existed, by payment id.
	unmatched map[string]int
	swept     bool
	decisions map[string]int // subscription decisions, for the log
}

func newSubReplay(o *orderPlan) *subReplay {
	return &subReplay{sp: o.sub, mid: o.mid, topics: map[string]int{}, items: map[string]int{}, unmatched: map[string]int{},
		decisions: map[string]int{},
		order: fulfillment.PaidOrder{State: fulfillment.StatePendingPayment, HasSubscriptionLines: true,
			Total:      fulfillment.Money{Currency: "USD", MinorUnits: subMinor},
			Settlement: &fulfillment.Settlement{Token: payToken, Network: payNetwork, Amount: decimal.RequireFromString(payAmount)}}}
}

// subStep is what processing one event did: its decision, and whether it
// is linked to the order and applied to the subscription.
type subStep struct {
	decision   fulfillment.Decision
	order, sub bool
}

// apply decides ev, received at received, the way the inbox does: an event
// no order matches that names the known subscription is the subscription
// rules'; one naming it before it exists is unmatched (a lifecycle event)
// or the order rules' (unmatched, for a payment); what matches the order
// is the state machine's, and the payment that pays it pays a period of
// the subscription (created by it) as a purchase.
func (rp *subReplay) apply(ev fulfillment.ProviderEvent, received time.Time) subStep {
	ev.OccurredAt = fulfillment.PlausibleOccurrence(ev.OccurredAt, received)
	matched := ev.Payment.MerchantOrderID == rp.mid && !ev.TestMode
	lifecycle := ev.Kind == fulfillment.EventSubscriptionOverdue || ev.Kind == fulfillment.EventSubscriptionCancelled
	switch {
	case !matched && rp.exists && fulfillment.ForSubscription(ev):
		return subStep{decision: rp.decide(ev, received, false).Decision, sub: true}
	case !matched && fulfillment.ForSubscription(ev) && lifecycle:
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
	}
	return step
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
			rp.items[string(e.Kind)+"|"+eventRef] = 1
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

// subMessage is an outbox message a subscription's event calls for.
type subMessage struct{ dest, key, about string }

// subscriptionItem reports whether it is checked with a subscription (by
// checkSubscriptions): it names one, or it is the unmatched_payment of a
// subscription's payment decided before the subscription existed.
func (r *runner) subscriptionItem(it itemRow) bool {
	return it.subscriptionID != "" || (it.kind == itemUnmatchedPayment && it.env == "live" && r.subUnmatched[it.paymentID] > 0)
}

// checkSubscriptions holds every subscription order and its subscription
// to the replay of their events: each decision and link the rules', in
// processing order; the order paid once, without grants; the
// subscription's state, its periods once per bill, its events once per
// topic and period (and their outbox messages, checked with the outbox),
// its extra_payment items once per event; the sweeper's end of access
// exactly when the rules grant no more access at the check, once. Nothing
// else is stored about subscriptions.
func (r *runner) checkSubscriptions(s *dbState) {
	ss, st := s.subs, &r.rep.Subscriptions
	byOrder := map[int][]int{} // order → its events
	for j, e := range r.w.events {
		if r.subOf(e) != nil {
			byOrder[e.order] = append(byOrder[e.order], j)
		}
	}
	applied := map[string][]inboxRow{} // subscription id → the events applied to it
	for _, rows := range s.inbox {
		for _, e := range rows {
			if e.subID != "" {
				applied[e.subID] = append(applied[e.subID], e)
			}
		}
	}
	itemsOf := map[string]map[string]int{} // subscription id → its items
	for _, it := range s.items {
		if it.subscriptionID == "" {
			continue
		}
		if itemsOf[it.subscriptionID] == nil {
			itemsOf[it.subscriptionID] = map[string]int{}
		}
		k := it.kind
		if it.state != "open" {
			k += "/" + it.state
		}
		itemsOf[it.subscriptionID][k+"|"+s.eventIDs[it.inboxID]]++
	}
	count := func(lost, dup int) {
		r.rep.Lost, r.rep.DuplicatedEffects = r.rep.Lost+lost, r.rep.DuplicatedEffects+dup
		st.Lost, st.Duplicated = st.Lost+lost, st.Duplicated+dup
	}
	replayed := Check{Name: "subscriptions: decisions replay the rules in order"}
	effects := Check{Name: "subscriptions: periods, events, items exactly once"}
	ended := Check{Name: "subscriptions: access ended by the sweeper when due, once"}
	checked := map[string]bool{}
	decisions := map[string]int{}
	r.subUnmatched, r.subMessages = map[string]int{}, nil
	for i, o := range r.w.orders {
		sp := o.sub
		if sp == nil {
			continue
		}
		replayed.Checked++
		orow, ok := s.orders[o.mid]
		if !ok {
			replayed.Failed++
			r.viol.add("missing order", "order %s does not exist", o.mid)
			continue
		}
		var srow *subRow
		if row, found := ss.rows[sp.id]; found {
			srow, checked[row.id] = &row, true
		}
		subID := ""
		if srow != nil {
			subID = srow.id
		}
		// Its stored events, in processing order (one stored more than
		// once is reported as such).
		mine := map[string]bool{}
		var seq []inboxRow
		idx := map[string]int{}
		for _, j := range byOrder[i] {
			e := r.w.events[j]
			mine[e.id] = true
			if rows := s.inbox[e.id]; len(rows) == 1 {
				seq, idx[e.id] = append(seq, rows[0]), j
			}
		}
		slices.SortFunc(seq, func(a, b inboxRow) int { return cmp.Compare(a.seq, b.seq) })

		rp := newSubReplay(o)
		ok = true
		ends := make([]time.Time, len(seq)) // when its access ends after each event
		byRules := make([]bool, len(seq))   // the event was the subscription rules' to decide
		for k, ev := range seq {
			e := r.w.events[idx[ev.eventID]]
			pe, err := parseYolfi(e)
			if err != nil {
				ok = false
				r.viol.add("checker", "event %s does not parse: %v", e.id, err)
				continue
			}
			step := rp.apply(pe, ev.received)
			wantOrder, wantSub := "", ""
			if step.order {
				wantOrder = orow.id
			}
			if step.sub {
				wantSub = pick(subID == "", "(its subscription)", subID)
			}
			if ev.decision != string(step.decision) || ev.orderID != wantOrder || ev.subID != wantSub {
				ok = false
				r.viol.add("wrong decision", "subscription %s: event %s (%s, %s) decided %q (order %q, subscription %q), want %q (order %q, subscription %q) at that point of its history",
					sp.id, e.id, e.typ, e.role, ev.decision, ev.orderID, ev.subID, step.decision, wantOrder, wantSub)
			}
			if rp.exists {
				ends[k] = rp.sub.AccessEnds(sp.plan)
			}
			byRules[k] = step.sub && !step.order
		}
		// The workload leaves the sweeper no choice of moment: no access
		// runs out while an event for the subscription rules is to come.
		for k := range seq {
			for m := k + 1; m < len(seq); m++ {
				if byRules[m] {
					if !ends[k].IsZero() && ends[k].Before(seq[m].processedAt) {
						r.viol.add("checker", "subscription %s: its access ended at %s, before its event %s was processed at %s: the sweeper may have come in between",
							sp.id, ends[k].UTC(), seq[m].eventID, seq[m].processedAt.UTC())
					}
					break
				}
			}
		}
		for _, ev := range append(slices.Clone(s.byOrder[orow.id]), applied[subID]...) {
			if !mine[ev.eventID] {
				ok = false
				r.viol.add("misrouted event", "event %s is linked to subscription order %s or its subscription, which it is not about", ev.eventID, o.mid)
			}
		}
		if !r.orderAsReplayed(s, o.mid, orow, rp.order) {
			ok = false
		}
		if !ok {
			replayed.Failed++
		}

		// The sweeper, at the check.
		rp.sweep(ss.now)
		for d, n := range rp.decisions {
			decisions[d] += n
		}
		for id, n := range rp.unmatched {
			r.subUnmatched[id] += n
		}
		db := subDB{row: srow}
		if srow != nil {
			db.periods, db.events, db.items = ss.periods[subID], ss.events[subID], itemsOf[subID]
			st.Periods += len(db.periods)
			st.Ended += btoi(srow.accessEnded)
		}
		effects.Checked++
		lost, dup, diffs := compareSubscription(rp, db)
		// Its order: paid once, and granting nothing of its own.
		if n := s.licenses[orow.id] + s.ledger[orow.id]; n > 0 {
			dup += n
			diffs = append(diffs, fmt.Sprintf("its order has %d licenses and ledger entries", n))
		}
		count(lost, dup)
		if len(diffs) > 0 {
			effects.Failed++
			r.viol.add("subscription effects", "subscription %s (%s, order %s): %s (%d lost, %d duplicated)",
				sp.id, sp.story, o.mid, strings.Join(diffs, "; "), lost, dup)
		}
		if sp.lapses() || rp.swept {
			ended.Checked++
			switch {
			case sp.lapses() != rp.swept:
				ended.Failed++
				r.viol.add("checker", "subscription %s (%s): the rules end its access at the check: %v", sp.id, sp.story, rp.swept)
			case srow == nil || !srow.accessEnded || db.events[topicKey(string(fulfillment.TopicSubscriptionAccessEnded), rp.sub.Periods)] != 1:
				ended.Failed++
			}
		}
		if srow != nil {
			for _, k := range slices.Sorted(maps.Keys(rp.topics)) {
				topic, period, _ := strings.Cut(k, "|")
				var n int
				_, _ = fmt.Sscan(period, &n)
				for _, d := range r.dests {
					if slices.Contains(d.events, topic) {
						r.subMessages = append(r.subMessages, subMessage{d.id,
							fulfillment.SubscriptionEventKey(subID, fulfillment.Topic(topic), n), "subscription " + sp.id})
					}
				}
			}
		}
	}

	// Nothing else about subscriptions.
	other := Check{Name: "subscriptions: none but the orders', sweeps done"}
	for _, row := range ss.rows {
		other.Checked++
		if !checked[row.id] {
			other.Failed++
			n := len(ss.periods[row.id]) + sum(ss.events[row.id]) + sum(itemsOf[row.id])
			count(0, n)
			r.viol.add("unexpected subscription", "subscription %s (%s) with %d periods, events and items: no order of the run started it",
				row.id, row.providerID, n)
		}
	}
	for id, items := range itemsOf {
		if _, known := ss.rows[id]; !known && !checked[id] {
			count(0, sum(items))
			other.Failed++
			r.viol.add("unexpected item", "items %v name subscription %s, which does not exist", truncMap(items), id)
		}
	}
	if ss.failedSweeps > 0 || ss.dueSweeps > 0 {
		other.Failed++
		r.viol.add("sweeper", "%d subscription sweeps failed, %d due and not done at the check", ss.failedSweeps, ss.dueSweeps)
	}
	r.addCheck(replayed)
	r.addCheck(effects)
	r.addCheck(ended)
	r.addCheck(other)
	st.Stale = decisions[string(fulfillment.DecisionStaleIgnored)]
	r.logf("subscriptions: decisions %s; %d periods, %d subscriptions ended (%d due to end)",
		formatCounts(decisions), st.Periods, st.Ended, st.Lapsing)
}

// parseYolfi parses a planned Yolfi event from its bytes, as the webhook
// gateway does.
func parseYolfi(e *eventPlan) (fulfillment.ProviderEvent, error) {
	h := http.Header{}
	h.Set(yolfi.EventIDHeader, e.id)
	return yolfi.Parse(yolfiLive, h, e.body)
}

func formatCounts(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
