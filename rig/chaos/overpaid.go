package chaos

// The overpaid orders of a run: a fifth of the T-Bank orders are paid more
// than their total (a CONFIRMED whose Amount is the total and an excess, as
// when the payer was charged an older, higher price), which the service
// fulfils, flagging the overpayment. Most are then refunded in parts, the
// excess first as a merchant returns it: part of the excess, the rest of it
// (now and then with part of the price in the same refund), then a part of
// the price, and for some the full refund of what is left. The refunds are
// redelivered, reordered and sent concurrently like every T-Bank refund;
// for a third of the orders the first partial refunds are processed before
// the CONFIRMED (which waits for them), for another third one goes with it.
// The full refund waits for the CONFIRMED: one processed first would leave
// the order unpaid, another story (tbank.go has it).
//
// The rule they exercise: a refund takes back a share of the balance
// credit only for what it returns of the order's price, once the excess
// is returned. checkOverpaid holds each order's ledger, recorded refunds
// and overpayment item to that rule, computed here from the plan and the
// order in which the service processed the notifications — not by the
// service's functions.

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fulfillplatform/fulfillment/ingest/tbank"
)

const itemOverpayment = "overpayment"

// How an overpaid order's first partial refunds are delivered relative to
// its CONFIRMED.
const (
	overAfter  = iota // after it
	overFirst         // before it: the CONFIRMED waits until they are processed
	overRacing        // the first one at the same moment as it
)

// OverpaymentReport is the overpaid share of a run: the T-Bank orders paid
// more than their total and their refunds (planned), and at the check what
// the refunds took back and what was lost or doubled.
type OverpaymentReport struct {
	Orders  int // T-Bank orders paid more than their total
	Refunds int // their refund notifications, partial and full
	// Of the partial refunds: those planned to return only excess, those
	// returning the rest of the excess and part of the price at once, and
	// those of the price only (the rest of it, for InParts, among them).
	Excess, Straddling, Price int
	Full                      int // full refunds, each after partial ones
	InParts                   int // orders refunded all they paid (more than their total) in partial refunds
	Early                     int // partial refunds planned before their CONFIRMED (waited for, or racing it)
	// At the check: the partial refunds recorded, of which those the
	// orders' CONFIRMED processed after them; those that returned excess
	// only and so took nothing back; those that took a share back.
	Recorded, RecordedFirst, NothingBack, TookBack int
	// Lost: reversals, recorded refunds and overpayment items missing;
	// Duplicated: those beyond what is due (part of the run's totals).
	Lost, Duplicated int
}

// planOverpaid plans the notifications of T-Bank order i paid excess more
// than its total: AUTHORIZED and CONFIRMED of that amount, then its
// refunds, each a distinct amount (the service tells partial refunds of
// one payment apart by amount).
func (g *generator) planOverpaid(i int, excess int64, at func(int) time.Duration, spread, window time.Duration) {
	o, st := g.w.orders[i], &g.w.stats.Overpaid
	o.excess = excess
	total, pay := o.total(), paymentID(i)
	paid := total + excess
	st.Orders++
	g.addTBank(i, tbank.StatusAuthorized, pay, paid, "", rolePay, at(i))
	confirmAt := at(i)
	confirm := len(g.w.events)
	g.addTBank(i, tbank.StatusConfirmed, pay, paid, "", rolePay, confirmAt)

	// The refunds, as amounts: a1 of the excess; the rest of it, a2 (and
	// some of the price with it, now and then); a3 of the price; what is
	// left, in full or, half the time, as a last partial refund — more
	// than the total refunded in parts, which only what the payment paid
	// allows.
	steps := 0
	switch x := g.rng.Float64(); {
	case x < 0.1: // no refund
	case x < 0.3:
		steps = 1
	case x < 0.5:
		steps = 2
	case x < 0.75:
		steps = 3
	default:
		steps = 4
	}
	if st.Orders == 1 {
		// The first has a refund of the excess and one of the price at
		// least, whatever the draws of the others: a short run has a
		// handful of overpaid orders, and each should be seen (with
		// seven, none had one of the price about once in a hundred runs).
		steps = max(steps, 3)
	}
	if steps == 0 {
		return
	}
	// (The excess is 3 at least: two distinct parts of it.)
	straddle := steps >= 3 && g.rng.IntN(3) == 0
	var a1, a2 int64
	for a1 == a2 {
		a1 = 1 + g.rng.Int64N(excess-1)
		if a2 = excess - a1; straddle {
			a2 += 1 + g.rng.Int64N(total/4)
		}
	}
	a3 := 1 + g.rng.Int64N(total/4)
	for a3 == a1 || a3 == a2 {
		a3 = 1 + g.rng.Int64N(total/4)
	}
	partials := []int64{a1, a2, a3}[:min(steps, 3)]
	rest := paid - a1 - a2 - a3
	inParts := steps == 4 && g.rng.IntN(2) == 0 && !slices.Contains(partials, rest)
	if inParts {
		partials = append(partials, rest)
		st.InParts++
	}

	how := g.rng.IntN(3)
	t := confirmAt
	later := func() time.Duration {
		t = min(t+g.uniform(200*time.Millisecond, spread/2), window)
		return t
	}
	var first []int
	for k, a := range partials {
		when := later()
		switch {
		case k == 0 && how == overRacing:
			when = confirmAt
		case k < 2 && how == overFirst:
			when = max(confirmAt-g.uniform(200*time.Millisecond, spread/2), 0)
		}
		j := len(g.w.events)
		g.addTBank(i, tbank.StatusPartialRefunded, pay, a, "", roleRefund, when)
		if when <= confirmAt {
			g.w.events[j].early = true
			st.Early++
			first = append(first, j)
		}
		st.Refunds++
		g.w.stats.TBank.PartialRefunds++
		switch {
		case k == 0 || k == 1 && !straddle:
			st.Excess++
		case k == 1:
			st.Straddling++
		default:
			st.Price++
		}
	}
	if how == overFirst {
		g.w.events[confirm].after = first
	}
	if steps == 4 && !inParts {
		j := len(g.w.events)
		g.addTBank(i, tbank.StatusRefunded, pay, rest, "", roleRefund, later())
		g.w.events[j].after = []int{confirm}
		st.Refunds++
		st.Full++
		g.w.stats.TBank.FullRefunds++
	}
}

// overpaidReplay is what an overpaid order's notifications, in the order
// the service processed them, call for under the rule that refunds return
// the excess first.
type overpaidReplay struct {
	confirmed, full bool
	// recorded are the partial refunds recorded, by amount, in processing
	// order; first how many of them came before the CONFIRMED.
	recorded []int64
	first    int
	// afterFull counts the partial refunds processed after the full one:
	// nothing is left to refund, they take nothing back.
	afterFull int
	// fullFirst: the full refund was processed before the CONFIRMED,
	// which the plan rules out.
	fullFirst bool
}

// step takes the next notification processed: its status and amount.
func (rp *overpaidReplay) step(status string, amount int64) {
	switch status {
	case tbank.StatusConfirmed:
		if !rp.confirmed {
			rp.first = len(rp.recorded)
		}
		rp.confirmed = true
	case tbank.StatusPartialRefunded:
		switch {
		case slices.Contains(rp.recorded, amount):
		case rp.full:
			rp.afterFull++
		default:
			rp.recorded = append(rp.recorded, amount)
		}
	case tbank.StatusRefunded:
		rp.fullFirst = rp.fullFirst || !rp.confirmed
		rp.full = true
	}
}

// ledger is the order's ledger the replay calls for, as "movement ref"
// → minor units: the credit once paid; for each partial refund recorded,
// in order, the credit's share (rounded down, within what is left) of what
// it returned beyond the excess and the refunds before it; after the full
// refund, the opposite of what is left. It also returns how many of the
// refunds returned excess only.
func (rp *overpaidReplay) ledger(o *orderPlan, payment string) (rows map[string]int64, nothingBack int) {
	rows = map[string]int64{}
	if !rp.confirmed {
		return rows, 0
	}
	rows["credit"] = rubCredit
	left, total := int64(rubCredit), o.total()
	var before int64
	for _, a := range rp.recorded {
		// Of the payment's money, the excess goes back first: this refund
		// returns of the price what it brings past the excess.
		price := max(before+a-o.excess, 0) - max(before-o.excess, 0)
		before += a
		if price == 0 {
			nothingBack++
			continue
		}
		if share := min(rubCredit*price/total, left); share > 0 {
			rows[fmt.Sprintf("partial_reversal tbank:%s:%d RUB", payment, a)] = -share
			left -= share
		}
	}
	if rp.full && left > 0 {
		rows["refund_reversal"] = -left
	}
	return rows, nothingBack
}

// checkOverpaid holds every overpaid order to its replay: exactly the
// ledger movements the rule calls for (nothing taken back while only
// excess was refunded, then the price's share, each refund once, what is
// left by the full refund, never below zero), one recorded refund per
// partial refund however often it was announced, and one overpayment item
// once the CONFIRMED is processed.
func (r *runner) checkOverpaid(s *dbState) {
	ledger := Check{Name: "overpaid: credit back for the price only, once per refund"}
	refunds := Check{Name: "overpaid: each partial refund recorded once"}
	items := Check{Name: "overpaid: one overpayment item per overpaid order"}
	st := &r.rep.Overpaid
	tally := func(lost, dup int) {
		st.Lost += lost
		st.Duplicated += dup
		r.rep.Lost += lost
		r.rep.DuplicatedEffects += dup
	}
	byID := map[string]*eventPlan{}
	for _, e := range r.w.events {
		if e.endpoint == tbankEP && e.order >= 0 && r.w.orders[e.order].excess > 0 {
			byID[e.id] = e
		}
	}
	for i, o := range r.w.orders {
		row, ok := s.orders[o.mid]
		if o.excess == 0 || !ok {
			continue // a missing order is checkTBank's violation
		}
		var rp overpaidReplay
		for _, ev := range s.byOrder[row.id] {
			if e := byID[ev.eventID]; e != nil && e.order == i {
				rp.step(e.typ, e.amount)
			}
		}
		if rp.fullFirst {
			r.viol.add("harness", "order %s: the full refund was processed before the CONFIRMED it waits for", o.mid)
		}
		st.Recorded += len(rp.recorded)
		st.RecordedFirst += rp.first

		ledger.Checked++
		want, nothing := rp.ledger(o, paymentID(i))
		st.NothingBack += nothing
		st.TookBack += len(rp.recorded) - nothing
		got := map[string][]int64{}
		var sum int64
		for _, l := range s.entries[row.id] {
			k := l.movement
			if l.ref != "" {
				k += " " + l.ref
			}
			got[k] = append(got[k], l.minor)
			sum += l.minor
		}
		// A movement missing, or smaller than due, is lost; one not due,
		// larger than due, or there twice (taken back twice) duplicated.
		lost, dup := 0, 0
		for k, g := range got {
			w, ok := want[k]
			dup += len(g) - 1
			switch {
			case !ok || abs(g[0]) > abs(w):
				dup++
			case g[0] != w:
				lost++
			}
		}
		for k := range want {
			if _, ok := got[k]; !ok {
				lost++
			}
		}
		if lost+dup > 0 || sum < 0 {
			ledger.Failed++
			tally(lost, dup)
			r.viol.add("overpaid ledger", "order %s (total %d, paid %d more; partial refunds recorded %v, full refund %v): "+
				"movements %v (sum %d), want %s", o.mid, o.total(), o.excess, rp.recorded, rp.full, s.entries[row.id], sum, fmtLedger(want))
		}

		refunds.Checked++
		l, d := countDiff(amountCounts(rp.recorded), amountCounts(s.refunds[row.id]))
		if l+d > 0 {
			refunds.Failed++
			tally(l, d)
			r.viol.add("overpaid refunds", "order %s: refunds recorded %v, want %v (in processing order)", o.mid, s.refunds[row.id], rp.recorded)
		}

		items.Checked++
		n := 0
		for _, it := range s.items {
			if it.orderID == row.id && it.kind == itemOverpayment {
				n++
			}
		}
		if wantN := btoi(rp.confirmed); n != wantN {
			items.Failed++
			tally(max(wantN-n, 0), max(n-wantN, 0))
			r.viol.add("overpayment items", "order %s: %d overpayment items, want %d", o.mid, n, wantN)
		}
	}
	r.addCheck(ledger)
	r.addCheck(refunds)
	r.addCheck(items)
	r.logf("overpaid: %d partial refunds recorded (%d before their CONFIRMED), %d of them of the excess only, %d taking a share back",
		st.Recorded, st.RecordedFirst, st.NothingBack, st.TookBack)
}

// overpaidOrders are the ids of the orders paid more than their total.
func (r *runner) overpaidOrders(s *dbState) map[string]bool {
	ids := map[string]bool{}
	for _, o := range r.w.orders {
		if row, ok := s.orders[o.mid]; ok && o.excess > 0 {
			ids[row.id] = true
		}
	}
	return ids
}

// amountCounts counts each amount, keyed by its digits.
func amountCounts(amounts []int64) map[string]int {
	m := map[string]int{}
	for _, a := range amounts {
		m[fmt.Sprint(a)]++
	}
	return m
}

// fmtLedger formats ledger movements by key, sorted.
func fmtLedger(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return fmt.Sprint(parts)
}

func abs(n int64) int64 { return max(n, -n) }
