package chaos

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
	"slices"
	"strings"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

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
	itemsOf := map[string]map[string]int{}    // subscription id → its items
	orderItems := map[string]map[string]int{} // order id → the items naming it and no subscription
	for _, it := range s.items {
		k := it.kind
		if it.state != "open" {
			k += "/" + it.state
		}
		k += "|" + s.eventIDs[it.inboxID]
		if it.subscriptionID == "" {
			if it.orderID != "" {
				if orderItems[it.orderID] == nil {
					orderItems[it.orderID] = map[string]int{}
				}
				orderItems[it.orderID][k]++
			}
			continue
		}
		if itemsOf[it.subscriptionID] == nil {
			itemsOf[it.subscriptionID] = map[string]int{}
		}
		itemsOf[it.subscriptionID][k]++
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
	charges := Check{Name: "charge refunds: periods refunded once, none lost, items per charge"}
	eventOf := map[string]*eventPlan{}
	for _, e := range r.w.events {
		eventOf[e.id] = e
	}
	for i, o := range r.w.orders {
		sp := o.sub
		if sp == nil {
			continue
		}
		if sp.lateOrder != lateNone {
			// Paid before its order: checkLateFirst.
			if row, found := ss.rows[sp.id]; found {
				checked[row.id] = true
			}
			continue
		}
		replayed.Checked++
		// A charged subscription has no order (orow is empty).
		orow, ok := s.orders[o.mid]
		if !ok && !sp.tbank {
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
			pe, err := parseEvent(e)
			if err != nil {
				ok = false
				r.viol.add("checker", "event %s does not parse: %v", e.id, err)
				continue
			}
			var step subStep
			if sp.tbank {
				step = rp.applyCharge(pe, ev.received)
			} else {
				step = rp.apply(pe, ev.received)
			}
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
			} else if e.role == roleRenewal && pe.Payment.MerchantOrderID == o.mid && step.sub && !step.order {
				// A renewal naming its order, decided as the rules say by the
				// subscription's.
				switch step.decision {
				case fulfillment.DecisionRenewed:
					st.NamingRenewed++
				case fulfillment.DecisionDuplicatePayment:
					st.NamingExtra++
				case fulfillment.DecisionAlreadyApplied:
					st.NamingApplied++
				default: // no heading of the summary counts it
				}
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
		var linked []inboxRow
		if !sp.tbank {
			linked = slices.Clone(s.byOrder[orow.id])
		}
		for _, ev := range append(linked, applied[subID]...) {
			if !mine[ev.eventID] {
				ok = false
				r.viol.add("misrouted event", "event %s is linked to subscription order %s or its subscription, which it is not about", ev.eventID, o.mid)
			}
		}
		if !sp.tbank && !r.orderAsReplayed(s, o.mid, orow, rp.order) {
			ok = false
		}
		if !ok {
			replayed.Failed++
		}

		// Its early events were decided unmatched, then queued again by
		// the service when the subscription was created (a charge's refund:
		// when the charge paid its period); a payment's unmatched_payment
		// item is then resolved.
		lateOK := true
		for _, j := range byOrder[i] {
			e := r.w.events[j]
			rows := s.inbox[e.id]
			if !e.early || len(rows) == 0 {
				continue
			}
			if !rows[0].lateMatched {
				lateOK = false
				r.viol.add("late match", "subscription %s: event %s (%s), sent before its subscription existed (or its charge), was not queued again by the service",
					sp.id, e.id, e.typ)
			}
			if e.typ == yolfi.TypePaymentConfirmed {
				rp.items[itemUnmatchedPayment+"/resolved|"+e.id] = 1
			}
		}
		if ok && !lateOK {
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
			st.Ended += btoi(srow.accessEnded && !sp.tbank) // (a charged one's: ended by a refund)
		}
		effects.Checked++
		lost, dup, diffs := compareSubscription(rp, db)
		// Its order: paid once, and granting nothing of its own; its items
		// those the order rules opened (none for a renewal naming it).
		if n := s.licenses[orow.id] + s.ledger[orow.id]; !sp.tbank && n > 0 {
			dup += n
			diffs = append(diffs, fmt.Sprintf("its order has %d licenses and ledger entries", n))
		}
		if !sp.tbank {
			l, d := countDiff(rp.orderItems, orderItems[orow.id])
			lost, dup = lost+l, dup+d
			if l+d > 0 {
				diffs = append(diffs, fmt.Sprintf("its order's items %s, want %s", truncMap(orderItems[orow.id]), truncMap(rp.orderItems)))
			}
		}
		count(lost, dup)
		if sp.tbank {
			charges.Checked++
			c := chargeCheck{rp: rp, seq: seq, paid: map[string]bool{}, items: map[string]int{}}
			for _, p := range db.periods {
				c.paid[p.payment] = true
			}
			c.refunded = ss.refunded[subID]
			for _, it := range s.items {
				if subID != "" && it.subscriptionID == subID && refundItem(it.kind) {
					c.items[it.paymentID]++
				}
			}
			lost, dup, diffs := r.checkCharges(c, eventOf)
			count(lost, dup)
			if len(diffs) > 0 {
				charges.Failed++
				r.viol.add("charge refunds", "subscription %s: %s (%d lost, %d duplicated)", sp.id, strings.Join(diffs, "; "), lost, dup)
			}
		}
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
	r.addCheck(charges)
	r.addCheck(other)
	st.Stale = decisions[string(fulfillment.DecisionStaleIgnored)]
	r.logf("subscriptions: decisions %s; %d periods, %d subscriptions ended (%d due to end)",
		formatCounts(decisions), st.Periods, st.Ended, st.Lapsing)
	r.logf("renewals naming their order: %d sent; decided by the subscription rules: %d renewed, %d duplicate_payment, %d already_applied; %d events of their invoices naming it",
		st.NamingOrder, st.NamingRenewed, st.NamingExtra, st.NamingApplied, st.NamingInvoices)
	r.logf("charged subscriptions: %d registered, %d charges, %d refunds of %d of them (%d sent before their charge, %d with it); "+
		"%d applied (%d queued again by their charge), %d periods refunded",
		st.Registered, st.Charges, st.ChargeRefunds, st.RefundedCharges, st.RefundsFirst, st.RefundsRacing,
		st.RefundsApplied, st.RefundsRequeued, st.RefundedPeriods)
}

func formatCounts(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
