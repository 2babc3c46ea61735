package chaos

// The orders check: each ordinary Yolfi order's decisions replayed through
// the state machine in processing order, then held to the result (its state,
// grants, extra payment items and payment attempts).

import (
	"fmt"
	"maps"
	"slices"

	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// checkOrders: every order with a live confirmation is fulfilled, with
// exactly its licenses and credits, one open extra_payment item per extra
// payment (and one unidentified_payment item if a payment could not be told
// apart from the paying one), its attempts in their final states, and every
// event's decision what the state machine gives in the order the events were
// applied — an event that arrived stale never moved the order back.
func (r *runner) checkOrders(s *dbState) {
	// An order's live events, acknowledged or not: one stored whose
	// acknowledgement was lost (or never came) takes part like any other.
	byOrder := make([][]int, len(r.w.orders))
	var foreign []int // subscription events naming a plain order
	for i, e := range r.w.events {
		switch {
		case e.testMode:
		case r.w.orders[e.order].sub == nil && (e.typ == yolfi.TypeSubscriptionOverdue || e.typ == yolfi.TypeSubscriptionCancelled):
			foreign = append(foreign, i)
		default:
			byOrder[e.order] = append(byOrder[e.order], i)
		}
	}
	r.checkForeignSubscriptionEvents(s, foreign)
	grants := Check{Name: "paid orders fulfilled, licenses and credits exactly once"}
	extras := Check{Name: "one open extra_payment item per extra payment"}
	replay := Check{Name: "no order regressed: decisions replay the state machine"}
	attempts := Check{Name: "payment attempts recorded once, in their final state"}
	staleIgnored, staleEarly := 0, 0

	for i, o := range r.w.orders {
		if o.testOnly || o.tbank || o.sub != nil { // T-Bank orders: checkTBank; subscription orders: checkSubscriptions
			continue
		}
		row, ok := s.orders[o.mid]
		if !ok {
			grants.Checked++
			grants.Failed++
			r.viol.add("missing order", "order %s does not exist", o.mid)
			continue
		}
		planned := map[string]int{}
		for _, j := range byOrder[i] {
			planned[r.w.events[j].id] = j
		}
		linked := s.byOrder[row.id]
		applied := map[string]string{} // invoice → expected final attempt state

		// The decisions, replayed in processing order.
		replay.Checked++
		var payer *eventPlan // the confirmation that paid the order
		unidentified := false
		payments := map[string]bool{} // the extra payments
		ok = true
		for _, ev := range linked {
			j, mine := planned[ev.eventID]
			if !mine {
				ok = false
				r.viol.add("misrouted event", "event %s is linked to order %s, which it is not about", ev.eventID, o.mid)
				continue
			}
			delete(planned, ev.eventID)
			e := r.w.events[j]
			if e.invoice != "" {
				applied[e.invoice] = finalAttemptState(applied[e.invoice], e.typ)
			}
			var want string
			switch e.typ {
			case yolfi.TypeInvoiceCreated:
				want = pick(payer != nil, decStaleIgnored, decAttemptRecorded)
			case yolfi.TypeInvoiceOverdue:
				want = pick(payer != nil, decStaleIgnored, decAttemptExpired)
			case yolfi.TypeInvoiceCancelled:
				want = pick(payer != nil, decStaleIgnored, decAttemptCancelled)
			case yolfi.TypePaymentConfirmed:
				switch want = confirmedDecision(payer, e); want {
				case decFulfilled:
					payer = e
				case decUnidentified:
					unidentified = true
				case decDuplicatePayment:
					payments[e.payment] = true
				}
			default:
				want = decIgnoredType
			}
			if e.role == roleStale {
				if ev.decision == decStaleIgnored {
					staleIgnored++
				} else {
					staleEarly++
				}
			}
			if ev.decision != want {
				ok = false
				r.viol.add("wrong decision", "order %s: event %s (%s, %s) decided %q, want %q at that point of the order's history",
					o.mid, e.id, e.typ, e.role, ev.decision, want)
			}
		}
		for id, j := range planned {
			if r.snd.acked[j].Load() {
				ok = false
				r.viol.add("unlinked event", "order %s: acknowledged event %s (%s) is not linked to it", o.mid, id, r.w.events[j].typ)
			}
		}
		if !ok {
			replay.Failed++
		}
		if payer == nil {
			// No confirmation of it was stored (the run was cut short, which
			// is reported): it must still await payment, without effects.
			grants.Checked++
			if row.state != "pending_payment" || s.licenses[row.id] > 0 || s.ledger[row.id] > 0 {
				grants.Failed++
				r.viol.add("effects without payment", "order %s is %s with %d licenses and %d credits, but no confirmation of it was applied",
					o.mid, row.state, s.licenses[row.id], s.ledger[row.id])
			}
			continue
		}

		// The order and its grants.
		grants.Checked++
		paidAttempt, paidPayment := payer.paidRefs()
		licenses, credits := s.licenses[row.id], s.ledger[row.id]
		dup := max(0, licenses-int(o.licenseQty)) + max(0, credits-o.creditLines())
		r.rep.DuplicatedEffects += dup
		switch want := wantState(s, o, row.id); {
		case row.state != want:
			grants.Failed++
			r.viol.add("order state", "order %s is %s, want %s", o.mid, row.state, want)
		case row.paidAttempt != paidAttempt || row.paidPayID != paidPayment:
			grants.Failed++
			r.viol.add("paid by", "order %s is recorded paid by %s/%s, but the first confirmation applied was %s/%s",
				o.mid, row.paidAttempt, row.paidPayID, paidAttempt, paidPayment)
		case licenses != int(o.licenseQty) || s.distinct[row.id] != licenses:
			grants.Failed++
			r.viol.add("licenses", "order %s has %d licenses (%d distinct), want %d", o.mid, licenses, s.distinct[row.id], o.licenseQty)
		case credits != o.creditLines():
			grants.Failed++
			r.viol.add("credits", "order %s has %d ledger entries, want %d", o.mid, credits, o.creditLines())
		}

		// Extra payments: every confirmed payment told apart from the one
		// that paid; one unidentified_payment item for those that could not
		// be.
		extras.Checked++
		got := map[string]int{}
		var others []string
		nUnidentified := 0
		matchedLater := map[string]int{} // a late order's payments' unmatched_payment items, resolved
		for _, it := range s.items {
			switch {
			case it.orderID != row.id, it.messageID != 0: // another order's, or checked with its message
			case it.kind == itemExtraPayment && it.state == "open":
				got[it.paymentID]++
			case it.kind == itemUnidentified && it.state == "open":
				nUnidentified++
			case o.late && it.kind == itemUnmatchedPayment && it.state == "resolved":
				matchedLater[it.paymentID]++
			default:
				others = append(others, it.kind+"/"+it.state)
			}
		}
		if want := btoi(unidentified); nUnidentified != want {
			r.rep.DuplicatedEffects += max(0, nUnidentified-want)
			others = append(others, fmt.Sprintf("%d unidentified_payment, want %d", nUnidentified, want))
		}
		n := 0
		for _, k := range got {
			n += k
		}
		r.rep.DuplicatedEffects += max(0, n-len(payments))
		if n != len(payments) || !sameKeys(got, payments) || len(others) > 0 {
			extras.Failed++
			r.viol.add("extra payment items", "order %s: %d open extra_payment items for payments %v (other items: %v), want one for each of %v",
				o.mid, n, slices.Sorted(maps.Keys(got)), others, slices.Sorted(maps.Keys(payments)))
		}

		if o.late {
			r.checkLateOrder(s, i, byOrder[i], matchedLater, &extras)
		}

		// Payment attempts, one per invoice of the applied events, in their
		// final state.
		attempts.Checked++
		if gotA := s.attempts[row.id]; !maps.Equal(gotA, applied) {
			attempts.Failed++
			r.viol.add("payment attempts", "order %s: attempts %v, want %v", o.mid, gotA, applied)
		}
	}
	r.addCheck(grants)
	r.addCheck(extras)
	r.addCheck(replay)
	r.addCheck(attempts)
	r.logf("stale overdue events: %d ignored as stale, %d applied before their confirmation (as they arrived first)", staleIgnored, staleEarly)
}

// confirmedDecision is the decision the state machine gives a live
// payment.confirmed e (of the expected settlement) for an order paid by
// payer, nil while unpaid. Only two payments that identify themselves can be
// told apart.
func confirmedDecision(payer, e *eventPlan) string {
	switch {
	case payer == nil:
		return decFulfilled
	case e.payment != "" && payer.payment != "":
		return pick(e.payment == payer.payment, decAlreadyApplied, decDuplicatePayment)
	case e.invoice != "" && payer.invoice != "" && e.invoice != payer.invoice:
		return decDuplicatePayment
	}
	// Nothing tells the two payments apart.
	return decUnidentified
}

// finalAttemptState merges what an event says into an attempt's expected
// final state: confirmed wins; an expiry or cancellation beats created.
func finalAttemptState(prev, typ string) string {
	next := map[string]string{
		yolfi.TypeInvoiceCreated:   "created",
		yolfi.TypeInvoiceOverdue:   "expired",
		yolfi.TypeInvoiceCancelled: "cancelled",
		yolfi.TypePaymentConfirmed: "confirmed",
	}[typ]
	switch {
	case next == "":
		return prev
	case prev == "" || next == "confirmed":
		return next
	case prev == "confirmed" || next == "created":
		return prev
	}
	return next
}

func sameKeys(a map[string]int, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// checkLateOrder: late order i was created once its events (evs) were all
// processed, so every one stored was queued again by the service when the
// order came, and each payment confirmed has its unmatched_payment item,
// once, resolved (matchedLater: the order's, by payment). A racing order
// was created while its events were being processed: each was matched
// either at once (no item) or late (queued again, its item resolved), and
// none is left unmatched.
func (r *runner) checkLateOrder(s *dbState, i int, evs []int, matchedLater map[string]int, c *Check) {
	o := r.w.orders[i]
	want := map[string]bool{}
	notMatched, left := 0, 0
	for _, j := range evs {
		e := r.w.events[j]
		rows := s.inbox[e.id]
		if len(rows) == 0 {
			continue
		}
		if rows[0].state == "unmatched" {
			left++
		}
		if !rows[0].lateMatched && !o.racing {
			notMatched++
		}
		if e.typ == yolfi.TypePaymentConfirmed && (rows[0].lateMatched || !o.racing) {
			want[e.payment] = true
		}
		if e.typ == yolfi.TypePaymentConfirmed && o.racing {
			r.rep.RacingLate += btoi(rows[0].lateMatched)
			r.rep.RacingAtOnce += btoi(!rows[0].lateMatched && rows[0].state != "unmatched")
		}
	}
	n := 0
	for _, k := range matchedLater {
		n += k
	}
	r.rep.DuplicatedEffects += max(0, n-len(want))
	r.rep.Lost += max(0, len(want)-n)
	if notMatched > 0 || left > 0 || n != len(want) || !sameKeys(matchedLater, want) {
		c.Failed++
		r.viol.add("late match", "order %s, created after its events (racing them: %v): %d of them not queued again by the service, %d left unmatched; resolved unmatched_payment items for payments %v, want one for each of %v",
			o.mid, o.racing, notMatched, left, slices.Sorted(maps.Keys(matchedLater)), slices.Sorted(maps.Keys(want)))
	}
}

// checkForeignSubscriptionEvents: a subscription event naming a plain order
// and a subscription the service does not know is the subscription's, not
// the order's: stored once, unmatched, linked to no order.
func (r *runner) checkForeignSubscriptionEvents(s *dbState, events []int) {
	c := Check{Name: "subscription events naming a plain order: unmatched, not the order's"}
	for _, j := range events {
		e := r.w.events[j]
		rows := s.inbox[e.id]
		if len(rows) == 0 {
			continue // not stored: the sender's checks report what was acknowledged
		}
		c.Checked++
		if len(rows) != 1 || rows[0].decision != decUnmatched || rows[0].orderID != "" {
			c.Failed++
			r.viol.add("wrong decision", "event %s (%s) naming order %s and an unknown subscription: stored %d times, decided %q, order %q; want once, unmatched, no order",
				e.id, e.typ, r.w.orders[e.order].mid, len(rows), rows[0].decision, rows[0].orderID)
		}
	}
	r.addCheck(c)
}
