package chaos

import (
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
)

// overpaidEvents are the events of each overpaid order of w, by order
// index, in plan order.
func overpaidEvents(w *workload) map[int][]int {
	evs := map[int][]int{}
	for j, e := range w.events {
		if e.endpoint == tbankEP && e.order >= 0 && w.orders[e.order].excess > 0 {
			evs[e.order] = append(evs[e.order], j)
		}
	}
	return evs
}

// A fifth of the T-Bank orders are overpaid, with every story: refunds of
// the excess alone, of the excess and the price, full ones after the
// CONFIRMED, some before it or with it. The refunds of an order are of
// distinct amounts, never more than was paid (all of it with a full
// refund), each delivered twice at least.
func TestOverpaidWorkload(t *testing.T) {
	t.Parallel()
	w := plan(7, 400, 4000, 30*time.Second)
	st := w.stats.Overpaid
	if st.Orders < w.stats.TBank.Orders/10 || st.Orders > w.stats.TBank.Orders/3 || st.Excess == 0 || st.Straddling == 0 ||
		st.Price == 0 || st.Full == 0 || st.Early == 0 || st.InParts == 0 {
		t.Fatalf("overpaid share %+v of %d T-Bank orders", st, w.stats.TBank.Orders)
	}
	deliveries := map[int]int{}
	for _, d := range w.deliveries {
		deliveries[d.ev]++
	}
	waited, refunds, inParts := 0, 0, 0
	for i, evs := range overpaidEvents(w) {
		o := w.orders[i]
		paid := o.total() + o.excess
		confirm := -1
		var partials []int64
		var sum int64
		for _, j := range evs {
			e := w.events[j]
			ev, err := tbank.Parse(tbankEndpoint, tbankTerminal, e.body)
			if err != nil || ev.Payment.Amount.Value.IntPart() != e.amount {
				t.Fatalf("%s: parsed %+v: %v", e.id, ev.Payment, err)
			}
			switch e.typ {
			case tbank.StatusAuthorized:
			case tbank.StatusConfirmed:
				confirm = j
				if e.amount != paid || o.excess < 3 {
					t.Fatalf("order %s (total %d, excess %d) confirmed for %d", o.mid, o.total(), o.excess, e.amount)
				}
			case tbank.StatusPartialRefunded:
				if slices.Contains(partials, e.amount) {
					t.Fatalf("order %s: a second partial refund of %d", o.mid, e.amount)
				}
				if len(partials) == 0 && e.amount >= o.excess {
					t.Fatalf("order %s: its first refund (%d) is not part of the excess (%d)", o.mid, e.amount, o.excess)
				}
				partials, sum = append(partials, e.amount), sum+e.amount
			case tbank.StatusRefunded:
				if sum+e.amount != paid || !slices.Contains(e.after, confirm) {
					t.Fatalf("order %s: full refund of %d after %d of %d, after events %v (the CONFIRMED is %d)",
						o.mid, e.amount, sum, paid, e.after, confirm)
				}
			default:
				t.Fatalf("order %s: unexpected %s", o.mid, e.typ)
			}
			if e.role == roleRefund {
				refunds++
				if deliveries[j] < 2 {
					t.Fatalf("refund %s delivered %d times, want 2 at least", e.id, deliveries[j])
				}
				if e.early != (e.at <= w.events[confirm].at) {
					t.Fatalf("refund %s at %v, early %v; its CONFIRMED at %v", e.id, e.at, e.early, w.events[confirm].at)
				}
			}
		}
		if sum > paid {
			t.Fatalf("order %s: %d refunded in parts of %d paid", o.mid, sum, paid)
		}
		inParts += btoi(sum == paid)
		for _, j := range w.events[confirm].after {
			if !w.events[j].early {
				t.Fatalf("order %s: the CONFIRMED waits for %s, not an early refund", o.mid, w.events[j].id)
			}
			waited++
		}
	}
	if waited == 0 || refunds != st.Refunds || inParts != st.InParts {
		t.Fatalf("%d refunds waited for by their CONFIRMED, %d refunds (stats %d), %d orders refunded in full in parts (stats %d)",
			waited, refunds, st.Refunds, inParts, st.InParts)
	}
}

// The rule as the checker counts it: the excess is returned first, and only
// what a refund returns of the price takes the credit's share (rounded
// down) back; so the shares depend on the order the refunds were recorded
// in, not on when the CONFIRMED came.
func TestOverpaidLedger(t *testing.T) {
	t.Parallel()
	o := &orderPlan{mid: "m-1", licenseQty: 1, credit: true, tbank: true, excess: 900} // 69900 kopecks, 50000 of credit
	type step struct {
		status string
		amount int64
	}
	confirm := step{tbank.StatusConfirmed, 70800}
	cases := []struct {
		name    string
		steps   []step
		want    map[string]int64
		nothing int
	}{
		{"the excess in two parts: nothing back", []step{confirm, {tbank.StatusPartialRefunded, 400}, {tbank.StatusPartialRefunded, 500}},
			map[string]int64{"credit": 50000}, 2},
		{"then a tenth of the price", []step{{tbank.StatusPartialRefunded, 400}, confirm, {tbank.StatusPartialRefunded, 500},
			{tbank.StatusPartialRefunded, 6990}},
			map[string]int64{"credit": 50000, "partial_reversal tbank:42:6990 RUB": -5000}, 2},
		{"all that was paid in parts: the price in full, less the rounding", []step{confirm, {tbank.StatusPartialRefunded, 400},
			{tbank.StatusPartialRefunded, 7490}, {tbank.StatusPartialRefunded, 62910}},
			// 62910 of the price: 45000.
			map[string]int64{"credit": 50000, "partial_reversal tbank:42:7490 RUB": -5000, "partial_reversal tbank:42:62910 RUB": -45000}, 1},
		{"the rest of the excess and a tenth of the price at once, then the full refund", []step{{tbank.StatusPartialRefunded, 400},
			{tbank.StatusPartialRefunded, 7490}, confirm, {tbank.StatusRefunded, 62910}, {tbank.StatusPartialRefunded, 100}},
			map[string]int64{"credit": 50000, "partial_reversal tbank:42:7490 RUB": -5000, "refund_reversal": -45000}, 1},
		{"the price first: the excess is still returned first", []step{confirm, {tbank.StatusPartialRefunded, 6990},
			{tbank.StatusPartialRefunded, 400}, {tbank.StatusPartialRefunded, 500}},
			// 6090 of the price: 4356.2…; then 400 and 500 of it: 286.1…, 357.6…
			map[string]int64{"credit": 50000, "partial_reversal tbank:42:6990 RUB": -4356, "partial_reversal tbank:42:400 RUB": -286,
				"partial_reversal tbank:42:500 RUB": -357}, 0},
		{"never confirmed: nothing", []step{{tbank.StatusPartialRefunded, 400}}, map[string]int64{}, 0},
	}
	for _, tc := range cases {
		var rp overpaidReplay
		for _, s := range tc.steps {
			rp.step(s.status, s.amount)
		}
		got, nothing := rp.ledger(o, "42")
		if !maps.Equal(got, tc.want) || nothing != tc.nothing {
			t.Errorf("%s: ledger %s, %d of the excess only; want %s, %d", tc.name, fmtLedger(got), nothing, fmtLedger(tc.want), tc.nothing)
		}
	}
}

// The checker's rule agrees with the state machine on every overpaid order
// of a workload, whatever order its notifications are processed in (the
// full refund after the CONFIRMED, as the plan has it): the same ledger,
// the same refunds recorded, one overpayment item once confirmed.
func TestOverpaidRuleMatchesStateMachine(t *testing.T) {
	t.Parallel()
	w := plan(11, 600, 6000, 30*time.Second)
	rng := rand.New(rand.NewPCG(3, 5))
	for i, evs := range overpaidEvents(w) {
		o := w.orders[i]
		for range 20 {
			order := slices.Clone(evs)
			rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
			confirm := slices.IndexFunc(order, func(j int) bool { return w.events[j].typ == tbank.StatusConfirmed })
			full := slices.IndexFunc(order, func(j int) bool { return w.events[j].typ == tbank.StatusRefunded })
			if full >= 0 && full < confirm {
				order[full], order[confirm] = order[confirm], order[full]
			}
			if rng.IntN(4) == 0 { // the CONFIRMED not processed (yet)
				order = slices.DeleteFunc(order, func(j int) bool {
					return w.events[j].typ == tbank.StatusConfirmed || w.events[j].typ == tbank.StatusRefunded
				})
			}
			sm := newReplay(o, "order-1")
			var rp overpaidReplay
			var confirmID string
			for _, j := range order {
				e := w.events[j]
				ev, err := tbank.Parse(tbankEndpoint, tbankTerminal, e.body)
				if err != nil {
					t.Fatal(err)
				}
				sm.apply(ev)
				rp.step(e.typ, e.amount)
				if e.typ == tbank.StatusConfirmed {
					confirmID = e.id
				}
			}
			want := map[string]int64{}
			for _, l := range sm.ledger {
				k := l.movement
				if l.ref != "" {
					k += " " + l.ref
				}
				want[k] += l.minor
			}
			var recorded []int64
			for _, r := range sm.order.PartialRefunds {
				recorded = append(recorded, r.Amount.Value.IntPart())
			}
			got, _ := rp.ledger(o, paymentID(i))
			items := sm.items[string(fulfillment.ReconOverpayment)+"|"+confirmID]
			if !maps.Equal(got, want) || !slices.Equal(rp.recorded, recorded) || items != btoi(rp.confirmed) {
				var steps []string
				for _, j := range order {
					steps = append(steps, fmt.Sprintf("%s %d", w.events[j].typ, w.events[j].amount))
				}
				t.Fatalf("order %s (total %d, excess %d), processed %v: checker %s recording %v; state machine %s recording %v, %d overpayment items",
					o.mid, o.total(), o.excess, steps, fmtLedger(got), rp.recorded, fmtLedger(want), recorded, items)
			}
		}
	}
}

// overpaidCheckFixture is an order of 69900 kopecks paid 900 more, refunded
// 400 and 500 (the excess), 6990 (a tenth of the price) and in full, and
// the database as the rule leaves it.
func overpaidCheckFixture() (*runner, *dbState) {
	w := &workload{tbankPassword: []byte(testTBankPassword)}
	w.g = &generator{rng: rand.New(rand.NewPCG(1, 2)), w: w}
	w.orders = []*orderPlan{{mid: "m-1", licenseQty: 1, credit: true, tbank: true, excess: 900}}
	pay := paymentID(0)
	for _, n := range []struct {
		status string
		amount int64
	}{{tbank.StatusConfirmed, 70800}, {tbank.StatusPartialRefunded, 400}, {tbank.StatusPartialRefunded, 500},
		{tbank.StatusPartialRefunded, 6990}, {tbank.StatusRefunded, 62910}} {
		w.g.addTBank(0, n.status, pay, n.amount, "", rolePay, 0)
	}
	const orderID = "order-1"
	s := &dbState{orders: map[string]orderRow{"m-1": {id: orderID, env: "live", state: "refunded"}}, byOrder: map[string][]inboxRow{},
		entries: map[string][]ledgerRow{orderID: {{1, "credit", 50000, ""}, {1, "partial_reversal", -5000, "tbank:" + pay + ":6990 RUB"},
			{1, "refund_reversal", -45000, ""}}},
		refunds: map[string][]int64{orderID: {400, 500, 6990}},
		items:   []itemRow{{kind: itemOverpayment, state: "open", env: "live", orderID: orderID}}}
	for k, e := range w.events {
		s.byOrder[orderID] = append(s.byOrder[orderID], inboxRow{id: int64(k + 1), eventID: e.id, orderID: orderID})
	}
	return &runner{o: Options{Log: io.Discard}, w: w, viol: newViolations()}, s
}

// The overpaid check passes the database the rule leaves, and counts what
// differs: a share taken back for a refund of the excess, or twice, is
// duplicated; a share missing, a refund not recorded or the overpayment
// item missing is lost.
func TestOverpaidCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		spoil     func(s *dbState)
		lost, dup int
	}{
		{"as the rule says", func(*dbState) {}, 0, 0},
		{"a share of a refund of the excess", func(s *dbState) {
			s.entries["order-1"] = append(s.entries["order-1"], ledgerRow{1, "partial_reversal", -286, "tbank:6000000000:400 RUB"})
		}, 0, 1},
		{"a share of the total, not of the price", func(s *dbState) { s.entries["order-1"][1].minor = -5064 }, 0, 1},
		{"a share taken twice", func(s *dbState) { s.entries["order-1"] = append(s.entries["order-1"], s.entries["order-1"][1]) }, 0, 1},
		{"a share missing", func(s *dbState) { s.entries["order-1"] = slices.Delete(s.entries["order-1"], 1, 2) }, 1, 0},
		{"a refund recorded twice", func(s *dbState) { s.refunds["order-1"] = append(s.refunds["order-1"], 500) }, 0, 1},
		{"a refund not recorded", func(s *dbState) { s.refunds["order-1"] = s.refunds["order-1"][1:] }, 1, 0},
		{"no overpayment item", func(s *dbState) { s.items = nil }, 1, 0},
		{"two overpayment items", func(s *dbState) { s.items = append(s.items, s.items[0]) }, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, s := overpaidCheckFixture()
			tc.spoil(s)
			r.checkOverpaid(s)
			wantCounted(t, r, "overpaid", r.rep.Overpaid.Lost, r.rep.Overpaid.Duplicated, tc.lost, tc.dup)
		})
	}
}
