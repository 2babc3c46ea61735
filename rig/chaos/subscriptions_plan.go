package chaos

// The subscription orders of the workload: the story each one tells, and the
// events that tell it, dated and gated as the overview in subscriptions.go
// describes.

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// subStory is how a subscription's story goes.
type subStory int

const (
	// storyActive: in access at the check — cancelled or not, past due or
	// not.
	storyActive subStory = iota
	// storyCancelled: cancelled at last, after a paid period that ended
	// days ago: the sweeper ends its access once the cancellation is
	// processed.
	storyCancelled
	// storyGraceOut: one period, whose grace runs out before the check
	// (some during the send phase): the sweeper ends its access then.
	storyGraceOut
)

func (s subStory) String() string {
	return [...]string{"active", "cancelled at last", "grace runs out"}[s]
}

// subPlan is the subscription an order starts.
type subPlan struct {
	id       string // the provider's subscription id (data.subscriptionId)
	customer string // the line's account_ref, and data.customer.clientReferenceId
	cfg      config.Plan
	plan     fulfillment.Plan
	story    subStory
	start    time.Time // createdAt of the first payment
	periods  int       // the periods the first payment and the renewals pay (charged: the charges)
	first    int       // the paying confirmation (event index)
	// tbank: a charged subscription (charges.go), registered ahead of its
	// payments under its card binding (id) and paid by recurrent charges;
	// no order.
	tbank bool
	// lateOrder: a Yolfi subscription registered ahead of its first
	// payment, whose order is created after that payment (late_first.go);
	// lateNone otherwise.
	lateOrder int
}

// lapses reports whether the subscription's access must be over at the
// check.
func (sp *subPlan) lapses() bool { return sp.story != storyActive }

// due is the end of the subscription's n-th period when they follow one
// another from its start, as the rules chain them: when the renewal of
// period n+1 is due.
func (sp *subPlan) due(n int) time.Time {
	t := sp.start
	for range n {
		t = sp.plan.Period.After(t)
	}
	return t
}

// subRequest is the CreateOrder request of a subscription order.
func (o *orderPlan) subRequest() *fulfillmentv1.CreateOrderRequest {
	sp := o.sub
	return &fulfillmentv1.CreateOrderRequest{
		OrgId: orgID, Environment: "live", MerchantOrderId: o.mid,
		Lines: []*fulfillmentv1.OrderLine{{
			Sku: subSKU + sp.cfg.ID, Kind: string(fulfillment.KindSubscription), Quantity: 1, AccountRef: sp.customer,
			PlanId: sp.cfg.ID, UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: subMinor},
		}},
		Settlement: &fulfillmentv1.Settlement{Token: payToken, Network: payNetwork, Amount: payAmount, Tolerance: "0"},
	}
}

// subscribe makes o a subscription order and picks its story: most stay
// in access, a fifth is cancelled at last, a tenth lets its grace run out.
func (g *generator) subscribe(o *orderPlan) {
	sp := &subPlan{id: "ysub_" + o.mid, customer: "cust_" + o.mid, cfg: planMonthly}
	switch x := g.rng.Float64(); {
	case x < 0.1:
		sp.story, sp.cfg = storyGraceOut, planWeekly
	case x < 0.3:
		sp.story = storyCancelled
	default:
		sp.story = storyActive
	}
	sp.plan = sp.cfg.Domain()
	o.sub, o.licenseQty, o.credit, o.external = sp, 0, false, nil
}

// planSubscription plans the events of subscription order i, whose story
// starts at start in the send window.
//
// Dates. An active subscription has 1 to 4 periods; its last renewal is
// dated a few days ago or a few hours ahead. The monthly plan's 80-day
// grace outlasts the first period (it ends at most two months and a week
// ago), so no order of its renewals and lifecycle events leaves it without
// access, except a cancellation (which takes the grace away) applied
// before the renewals whose periods end before the check: it waits for
// them. A subscription cancelled at last pays 1 to 3 periods, the last of
// which ended 4 to 10 days ago; the cancellation, dated after everything
// else, waits until every other event of it is processed. A subscription
// whose grace runs out pays one week, whose grace ends some time before the
// send phase or during it.
func (g *generator) planSubscription(i int, start, spread, window time.Duration) {
	o, st := g.w.orders[i], &g.w.stats.Subscriptions
	sp := o.sub
	st.Orders++
	base := g.base
	t0 := start + g.uniform(0, spread/4)
	later := func() time.Duration { return min(t0+g.uniform(spread/8, spread), window) }

	switch sp.story {
	case storyActive:
		sp.periods = 1 + g.rng.IntN(4)
		s := base.AddDate(0, -(sp.periods - 1), 0)
		if g.rng.IntN(2) == 0 {
			sp.start = s.Add(-g.uniform(time.Hour, 7*24*time.Hour))
		} else {
			sp.start = s.Add(g.uniform(2*time.Hour, 6*time.Hour))
		}
	case storyCancelled:
		sp.periods = 1 + g.rng.IntN(3)
		sp.start = base.AddDate(0, -sp.periods, 0).Add(-g.uniform(4*24*time.Hour, 10*24*time.Hour))
	case storyGraceOut:
		sp.periods = 1
		var ends time.Time
		if lo, hi := t0+spread/2, window*85/100; lo < hi && g.rng.IntN(2) == 0 {
			ends = base.Add(g.uniform(lo, hi)) // during the send phase
		} else {
			ends = base.Add(-g.uniform(time.Minute, 72*time.Hour))
		}
		// A plan of days: a period is exactly its days.
		sp.start = ends.Truncate(time.Second).Add(-sp.plan.Grace).AddDate(0, 0, -sp.plan.Period.Days)
	}
	sp.start = sp.start.UTC().Truncate(time.Second)
	if sp.plan.Period.Months > 0 && sp.start.Day() > 28 {
		// Months then chain without the end-of-month carry.
		sp.start = sp.start.AddDate(0, 0, 28-sp.start.Day())
	}
	if sp.lapses() {
		st.Lapsing++
	}
	// A lifecycle date d after t: d itself unless the service would not
	// believe it (more than a day ahead of its receipt), else soon after t.
	ahead := base.Add(12 * time.Hour)
	after := func(t time.Time, d time.Duration) time.Time {
		if t.Add(d).After(ahead) {
			return t.Add(g.uniform(10*time.Minute, time.Hour)).Truncate(time.Second)
		}
		return t.Add(d).Truncate(time.Second)
	}

	inv := func(n int) string { return fmt.Sprintf("inv_%s_s%d", o.mid, n) }
	pay := func(n int) string { return fmt.Sprintf("pay_%s_s%d", o.mid, n) }
	if g.rng.IntN(2) == 0 {
		g.addSub(i, yolfi.TypeInvoiceCreated, inv(1), "", sp.start.Add(-time.Minute), true, rolePay, max(0, t0-g.uniform(0, spread/8)), nil)
	}
	sp.first = g.addSub(i, yolfi.TypePaymentConfirmed, inv(1), pay(1), sp.start, true, rolePay, t0, nil)
	firstAgain := -1 // the first payment announced again, if it is
	if g.rng.Float64() < 0.1 {
		firstAgain = g.addSub(i, yolfi.TypePaymentConfirmed, inv(1), pay(1), sp.start, true, roleReannounce, later(), nil)
		st.Reannounced++
	}
	afterFirst := []int{sp.first}
	// Early: a quarter of the subscriptions that stay in access hear of
	// their renewals, their overdue notice and a cancellation that leaves
	// access to the check before their subscription exists: those are
	// delivered first, and the first payment only once each is processed
	// (decided unmatched). Creating the subscription queues them again.
	// (Such events may then be applied in any order without access running
	// out before the check, so the sweeper still has no choice of moment.)
	early := sp.story == storyActive && g.rng.IntN(4) == 0
	var earlyIdx []int
	// first is when an event is first delivered, and what it waits for:
	// early, at once and before the first payment; else at at, after.
	first := func(at time.Duration, after []int) (time.Duration, []int) {
		if !early {
			return at, after
		}
		return max(0, t0-g.uniform(0, spread/8)), nil
	}
	addEarly := func(idx int) int {
		if early {
			earlyIdx = append(earlyIdx, idx)
			g.w.events[idx].early = true
			st.Early++
		}
		return idx
	}
	var renewals []int // renewal j is renewals[j-1]
	for j := 1; j < sp.periods; j++ {
		created := sp.due(j).Add(g.uniform(0, 2*time.Hour)).Truncate(time.Second)
		// A third of the renewals name the subscription's merchant order
		// too, as a provider that copies the first checkout's order id
		// into its charges does: the order is paid by then, and the rules
		// take such a charge for the subscription's renewal, not the
		// order's second payment. They are never early: one delivered
		// before the first payment would find the order unpaid and be
		// taken for the order's payment (the first payment, later, for a
		// renewal), its period dated from the renewal's date.
		names := g.rng.Float64() < 1.0/3
		at, gate := first(later(), afterFirst)
		if names {
			at, gate = later(), afterFirst
		}
		if names && g.rng.IntN(2) == 0 {
			// The renewal invoice's creation, naming the order too, sent
			// with its payment: applied before it or after, it records no
			// attempt of the order, and the payment is renewed all the
			// same.
			g.addSub(i, yolfi.TypeInvoiceCreated, inv(j+1), "", created.Add(-time.Minute), true, roleLifecycle, at, afterFirst)
			st.NamingInvoices++
		}
		idx := g.addSub(i, yolfi.TypePaymentConfirmed, inv(j+1), pay(j+1), created, names, roleRenewal, at, gate)
		if !names {
			addEarly(idx)
		}
		renewals = append(renewals, idx)
		st.Renewals++
		st.NamingOrder += btoi(names)
		if g.rng.Float64() < 0.3 {
			// The same payment under another event id: at the same moment
			// (two events of one bill at once), or at another; when the
			// renewal names the order, half of them do too.
			again := at
			if g.rng.IntN(2) == 0 {
				again = later()
			}
			m := names && g.rng.IntN(2) == 0
			g.addSub(i, yolfi.TypePaymentConfirmed, inv(j+1), pay(j+1), created, m, roleRenewal, again, afterFirst)
			st.Reannounced++
			st.NamingOrder += btoi(m)
		}
		if g.rng.Float64() < 0.1 {
			m := names && g.rng.IntN(2) == 0
			g.addSub(i, yolfi.TypePaymentConfirmed, inv(j+1), pay(j+1)+"_b", after(created, time.Hour), m, roleRenewal, later(), afterFirst)
			st.ExtraPayments++
			st.NamingOrder += btoi(m)
		}
		if g.rng.Float64() < 0.25 {
			// The renewal invoice's expiry, once it is paid; for an active
			// subscription now and then undated (its receipt stands in).
			var when time.Time
			if sp.story != storyActive || g.rng.IntN(2) == 0 {
				when = after(created, 24*time.Hour)
			}
			g.addSub(i, yolfi.TypeInvoiceOverdue, inv(j+1), "", when, names, roleLifecycle, min(at+g.uniform(100*time.Millisecond, spread/2), window), []int{idx})
			st.InvoiceOverdue++
			st.NamingInvoices += btoi(names)
		}
	}
	for k := 1; k < len(renewals); k++ {
		if g.w.events[renewals[k]].at < g.w.events[renewals[k-1]].at {
			st.OutOfOrder++ // planned before the renewal of the period before it
		}
	}
	if sp.story != storyGraceOut && g.rng.Float64() < 0.4 {
		// Overdue a day after a period ended: before the next renewal's
		// date (stale if that renewal is applied first), or after the last.
		created := after(sp.due(g.rng.IntN(sp.periods)), 24*time.Hour+g.uniform(0, 2*time.Hour))
		at, gate := first(later(), afterFirst)
		addEarly(g.addSub(i, yolfi.TypeSubscriptionOverdue, "", "", created, false, roleLifecycle, at, gate))
		st.Overdue++
	}
	switch {
	case sp.story == storyCancelled:
		var all []int
		for j, e := range g.w.events {
			if e.order == i {
				all = append(all, j)
			}
		}
		created := sp.due(sp.periods - 1).Add(3*24*time.Hour + g.uniform(0, 3*24*time.Hour)).Truncate(time.Second)
		g.addSub(i, yolfi.TypeSubscriptionCancelled, "", "", created, false, roleLifecycle, min(start+spread, window), all)
		st.Cancelled++
	case sp.story == storyActive && g.rng.Float64() < 0.3:
		// Cancelled a few days (or hours) after a period ended. Once
		// cancelled, access lasts to the end of the paid period only: the
		// cancellation waits for the renewals without which that end would
		// come before the check; the others may come after it.
		created := after(sp.due(g.rng.IntN(sp.periods)), 2*24*time.Hour+g.uniform(0, 24*time.Hour))
		gate := []int{sp.first}
		for j, idx := range renewals {
			if sp.due(j + 1).Before(base.Add(aheadMargin)) {
				gate = append(gate, idx)
			}
		}
		at := later()
		if len(gate) == 1 {
			// It waits for no renewal: it may come early.
			at, gate = first(at, gate)
			addEarly(g.addSub(i, yolfi.TypeSubscriptionCancelled, "", "", created, false, roleLifecycle, at, gate))
		} else {
			g.addSub(i, yolfi.TypeSubscriptionCancelled, "", "", created, false, roleLifecycle, at, gate)
		}
		st.Cancelled++
	}
	if len(earlyIdx) > 0 {
		// Either announcement of the first payment may create the
		// subscription.
		g.w.events[sp.first].after, g.w.events[sp.first].afterDecided = earlyIdx, true
		if firstAgain >= 0 {
			g.w.events[firstAgain].after, g.w.events[firstAgain].afterDecided = earlyIdx, true
		}
	}
}

// addSub plans one event of subscription order i and returns its index: a
// live Yolfi event about the order's subscription, dated created (the zero
// time: undated), naming the order when merchant; a payment.confirmed
// carries the customer's reference. It is first delivered at at, once the
// events after are processed.
func (g *generator) addSub(i int, typ, invoice, payment string, created time.Time, merchant bool, role string, at time.Duration, after []int) int {
	o := g.w.orders[i]
	sp := o.sub
	p := yolfi.Payload{ID: g.hexID("evt_"), Type: typ, OrgID: orgID,
		Data: yolfi.PayloadData{InvoiceID: invoice, SubscriptionID: sp.id}}
	if g.rng.IntN(4) != 0 {
		p.Livemode = ptr(true)
	}
	if !created.IsZero() {
		p.CreatedAt = created.UTC().Format(time.RFC3339)
	}
	if merchant {
		p.Data.MerchantOrderID = o.mid
	}
	if typ == yolfi.TypePaymentConfirmed {
		p.Data.PaymentID = payment
		p.Data.Amount, p.Data.Token, p.Data.Network = payAmount, payToken, payNetwork
		p.Data.TxHash = g.hexID("0x")
		p.Data.Customer = &yolfi.PayloadCustomer{ClientReferenceID: sp.customer}
	}
	body, err := json.Marshal(p)
	if err != nil {
		panic(err) // strings and pointers to them always marshal
	}
	g.w.events = append(g.w.events, &eventPlan{id: p.ID, order: i, typ: typ, endpoint: liveEP, invoice: invoice, payment: payment,
		role: role, at: at, body: body, after: slices.Clone(after)})
	g.w.stats.Subscriptions.Events++
	return len(g.w.events) - 1
}
