package chaos

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// The tenant and endpoints of a run.
const (
	orgID       = "org_chaos"
	liveEP      = "yolfi-live"
	testEP      = "yolfi-test"
	payAmount   = "25.000000"
	payToken    = "USDT"
	payNetwork  = "TRON"
	licenseSKU  = "chaos-license"
	creditSKU   = "chaos-credit"
	licensePart = 1000 // minor units per license
	creditMinor = 500
	// externalSKU, followed by the destination id, is the SKU of an
	// external line.
	externalSKU   = "chaos-box-"
	externalMinor = 700
)

// Roles of an event in its order's story.
const (
	rolePay        = "pay"        // invoice.created / payment.confirmed of the paying invoice
	roleExtra      = "extra"      // another invoice, also paid: an extra payment
	roleReannounce = "reannounce" // the paying payment announced again under another event id
	roleStale      = "stale"      // invoice.overdue of the paying invoice, sent after its confirmation
	roleAbandoned  = "abandoned"  // an invoice that expires or is cancelled unpaid
	roleOther      = "other"      // an event type that does not concern orders
	roleTest       = "test"       // a provider test-mode event
	roleRefund     = "refund"     // a T-Bank REFUNDED or PARTIAL_REFUNDED of the paying payment, or of a recurrent charge (charges.go)
	roleProbe      = "probe"      // an outage probe (no order)
	roleRenewal    = "renewal"    // a payment.confirmed that renews a subscription (subscriptions.go), or a T-Bank recurrent charge (charges.go)
	roleLifecycle  = "lifecycle"  // subscription.overdue / .cancelled, invoice.overdue of a renewal (subscriptions.go)
	roleFirst      = "first"      // a registered subscription's first payment, before its order (late_first.go)
)

// orderPlan is one order of the workload.
type orderPlan struct {
	mid        string // merchant order id
	licenseQty int64
	credit     bool // has a balance_credit line
	testOnly   bool // receives only test-mode events: must stay unpaid
	// external are the destinations of its external lines, one line each,
	// after the license and credit lines.
	external []string
	// tbank: priced in RUB, with a license line and a balance_credit line
	// and nothing else, paid through the T-Bank endpoint (tbank.go).
	tbank bool
	// excess: a T-Bank order paid this many kopecks more than its total
	// (overpaid.go); 0 for the others.
	excess int64
	// sub: one subscription line, and nothing else, paid in USDT; it starts
	// a subscription renewed, lapsed and cancelled by events of its own
	// (subscriptions.go). When sub.tbank, there is no order: the
	// subscription is registered ahead of its payments and paid by T-Bank
	// recurrent charges, some of them refunded (charges.go).
	sub *subPlan
	// late: created only once every event of it is processed (each
	// decided unmatched), as by a storefront slower than the provider;
	// creating it queues them again (late matching).
	late bool
	// racing (a late order): created as soon as its first event is
	// acknowledged, while the service may be deciding it, rather than
	// once its events are decided: the race late matching's locks close.
	racing bool
	id     string
}

// request is the CreateOrder request of the order; repeating it is
// idempotent.
func (o *orderPlan) request() *fulfillmentv1.CreateOrderRequest {
	if o.tbank {
		return o.tbankRequest()
	}
	if o.lateFirstSub() {
		return o.lateFirstRequest()
	}
	if o.sub != nil {
		return o.subRequest()
	}
	lines := []*fulfillmentv1.OrderLine{{
		Sku: licenseSKU, Kind: "license", Quantity: o.licenseQty,
		UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: licensePart},
	}}
	if o.credit {
		lines = append(lines, &fulfillmentv1.OrderLine{
			Sku: creditSKU, Kind: "balance_credit", Quantity: 1, AccountRef: "acct_" + o.mid,
			UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: creditMinor},
		})
	}
	for _, d := range o.external {
		lines = append(lines, &fulfillmentv1.OrderLine{
			Sku: externalSKU + d, Kind: "external", Quantity: 1, Destination: d,
			UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: externalMinor},
		})
	}
	return &fulfillmentv1.CreateOrderRequest{
		OrgId: orgID, Environment: "live", MerchantOrderId: o.mid, Lines: lines,
		Settlement: &fulfillmentv1.Settlement{Token: payToken, Network: payNetwork, Amount: payAmount, Tolerance: "0"},
	}
}

// creditLines is the number of ledger credits the order is due once paid.
func (o *orderPlan) creditLines() int {
	if o.credit {
		return 1
	}
	return 0
}

// externalLine is an external line of an order: its number (lines count
// from 0, in the order CreateOrder lists them) and its destination.
type externalLine struct {
	no   int
	dest string
}

// externalLines lists the order's external lines.
func (o *orderPlan) externalLines() []externalLine {
	first := 1 + o.creditLines()
	lines := make([]externalLine, len(o.external))
	for k, d := range o.external {
		lines[k] = externalLine{no: first + k, dest: d}
	}
	return lines
}

// eventPlan is one provider event: signed bytes delivered once or more.
type eventPlan struct {
	id       string
	order    int // index in the workload's orders; -1 for probes
	typ      string
	endpoint string
	testMode bool
	invoice  string
	payment  string
	role     string
	at       time.Duration // first delivery, from the start of the send phase
	body     []byte
	// alt is the same T-Bank notification with PaymentId spelled the other
	// way (a JSON number or string): the same event. nil for Yolfi.
	alt    []byte
	amount int64 // a T-Bank notification's Amount (kopecks)
	// after are the events (indexes) that must be processed before this
	// one is first delivered, as a provider's renewal comes after the
	// payment that started the subscription (subscriptions.go).
	after []int
	// early: a subscription's event delivered, and processed, before the
	// first payment that creates its subscription is sent
	// (planSubscription), or a charge's refund before the charge
	// (planCharges), or an overpaid order's partial refund before (or
	// with) its CONFIRMED (planOverpaid).
	early bool
	// afterDecided: the events after need only be decided (unmatched
	// will do), not applied: the first payment of a subscription whose
	// events come early waits for them so.
	afterDecided bool
}

// attemptRef is the payment attempt the service derives from the event
// (yolfi: the invoice id, else the payment id).
func (e *eventPlan) attemptRef() string {
	if e.invoice != "" {
		return e.invoice
	}
	return e.payment
}

// identified reports whether a confirmation identifies its payment (it
// names an invoice or a payment), so that the state machine can tell it
// apart from another payment of the order.
func (e *eventPlan) identified() bool { return e.invoice != "" || e.payment != "" }

// paidRefs are the refs the service records for a confirmation that pays
// its order: none when it does not identify its payment.
func (e *eventPlan) paidRefs() (attemptRef, paymentID string) {
	if !e.identified() {
		return "", ""
	}
	return e.attemptRef(), e.payment
}

// delivery is one sending of an event's bytes (its alt bytes when alt),
// retried until acknowledged.
type delivery struct {
	ev  int
	at  time.Duration
	alt bool
}

// workload is everything the sender will deliver.
type workload struct {
	orders     []*orderPlan
	events     []*eventPlan
	deliveries []delivery // sorted by time
	stats      Report     // the workload figures only
	g          *generator
	// tbankPassword signs the T-Bank notifications.
	tbankPassword []byte
}

// generator builds a workload deterministically from a seed.
type generator struct {
	rng  *rand.Rand
	base time.Time // createdAt of an event sent at offset 0
	w    *workload
}

// externalPlan is the external lines an order may have, equally likely:
// half the orders have none; the others one line for the idempotent
// destination, one for the other, or one for each.
var externalPlan = [][]string{nil, nil, nil, nil, nil, {destIdempotent}, {destPlain}, {destPlain}, {destIdempotent, destPlain}, {destIdempotent, destPlain}}

// newWorkload plans nOrders orders, a quarter of them paid through T-Bank,
// whose notifications are signed with tbankPassword — a quarter of those
// charged subscriptions instead (charges.go).
func newWorkload(seed int64, nOrders int, tbankPassword []byte) *workload {
	w := &workload{tbankPassword: tbankPassword}
	g := &generator{rng: rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15)), w: w}
	w.g = g
	for i := range nOrders {
		o := &orderPlan{
			mid:        fmt.Sprintf("chaos-%06d", i),
			licenseQty: 1 + g.rng.Int64N(3),
			credit:     g.rng.IntN(2) == 0,
			testOnly:   g.rng.Float64() < 0.05,
			external:   externalPlan[g.rng.IntN(len(externalPlan))],
		}
		if !o.testOnly && g.rng.IntN(4) == 0 {
			o.tbank, o.credit, o.external = true, true, nil
		}
		// (Not order 0, whose order the outage probe reads.)
		if o.tbank && g.rng.IntN(4) == 0 && i > 0 {
			g.registerCharged(o, i)
		}
		if !o.testOnly && !o.tbank && o.sub == nil && g.rng.IntN(8) == 0 {
			g.subscribe(o)
		}
		if !o.testOnly && !o.tbank && o.sub == nil && g.rng.IntN(16) == 0 {
			o.late = true
			o.racing = w.stats.LateOrders%2 == 1
			w.stats.LateOrders++
			w.stats.RacingOrders += btoi(o.racing)
		}
		// A subscription registered ahead, paid before its order is
		// created (late_first.go).
		if !o.testOnly && !o.tbank && o.sub == nil && !o.late && i > 0 && i != nOrders/2 && g.rng.IntN(30) == 0 {
			g.registerLateFirst(o, g.pickLateFirst())
		}
		w.stats.ExternalLines += len(o.external)
		w.orders = append(w.orders, o)
	}
	if !slices.ContainsFunc(w.orders, func(o *orderPlan) bool { return o.testOnly }) {
		o := w.orders[nOrders/2] // at least one
		o.testOnly, o.tbank, o.sub = true, false, nil
	}
	// However short the run, two orders fit their first payment (one of
	// them racing it), one asks another amount, one has a license alone.
	lf := &w.stats.LateFirst
	for i, o := range w.orders {
		var kind int
		switch {
		case lf.Fit < 2:
			kind = lateFit
		case lf.OtherPrice == 0:
			kind = lateOtherPrice
		case lf.LicenseOnly == 0:
			kind = lateLicenseOnly
		}
		if kind == lateNone {
			break
		}
		if i > 0 && !o.testOnly && !o.tbank && o.sub == nil && !o.late {
			w.stats.ExternalLines -= len(o.external)
			g.registerLateFirst(o, kind)
		}
	}
	return w
}

// planEvents plans at least nEvents events for the orders, whose first
// deliveries are spread over window from now, plus 20% redeliveries.
func (w *workload) planEvents(nEvents int, window time.Duration, now time.Time) {
	g := w.g
	g.base = now.UTC().Truncate(time.Second)
	nOrders := len(w.orders)
	// Each order's events arrive within spread of its own start.
	spread := min(window/6, 15*time.Second)
	starts := make([]time.Duration, nOrders)
	for i := range starts {
		starts[i] = g.uniform(0, window-spread)
	}
	at := func(i int) time.Duration { return starts[i] + g.uniform(0, spread) }

	for i, o := range w.orders {
		if o.testOnly {
			w.stats.TestOnlyOrders++
			inv, pay := "inv_"+o.mid+"_t", "pay_"+o.mid+"_t"
			g.add(i, yolfi.TypeInvoiceCreated, liveEP, g.testKind(), inv, "", roleTest, at(i))
			g.add(i, yolfi.TypePaymentConfirmed, liveEP, g.testKind(), inv, pay, roleTest, at(i))
			if g.rng.IntN(2) == 0 {
				// Test events on the test endpoint: another environment,
				// where no order has this merchant order id.
				g.add(i, yolfi.TypeInvoiceCreated, testEP, g.testKind(), inv, "", roleTest, at(i))
				g.add(i, yolfi.TypePaymentConfirmed, testEP, g.testKind(), inv, pay, roleTest, at(i))
			}
			continue
		}
		if o.tbank {
			g.planTBank(i, at, spread, window)
			continue
		}
		if o.lateFirstSub() {
			g.planLateFirst(i, starts[i], spread)
			continue
		}
		if o.sub != nil && o.sub.tbank {
			g.planCharges(i, starts[i], spread, window)
			continue
		}
		if o.sub != nil {
			g.planSubscription(i, starts[i], spread, window)
			continue
		}
		inv, pay := "inv_"+o.mid+"_p", "pay_"+o.mid+"_p"
		g.add(i, yolfi.TypeInvoiceCreated, liveEP, live, inv, "", rolePay, at(i))
		confirmAt := at(i)
		g.add(i, yolfi.TypePaymentConfirmed, liveEP, live, inv, pay, rolePay, confirmAt)
		if g.rng.Float64() < 0.4 {
			// Stale: the paying invoice's expiry, sent after its confirmation.
			late := min(confirmAt+g.uniform(300*time.Millisecond, spread), window)
			g.add(i, yolfi.TypeInvoiceOverdue, liveEP, live, inv, "", roleStale, late)
			w.stats.StaleEvents++
		}
		if g.rng.Float64() < 0.15 {
			n := 1
			if g.rng.Float64() < 0.1 {
				n = 2
			}
			for k := range n {
				xinv, xpay := fmt.Sprintf("inv_%s_x%d", o.mid, k), fmt.Sprintf("pay_%s_x%d", o.mid, k)
				g.add(i, yolfi.TypeInvoiceCreated, liveEP, live, xinv, "", roleExtra, at(i))
				g.add(i, yolfi.TypePaymentConfirmed, liveEP, live, xinv, xpay, roleExtra, at(i))
				w.stats.ExtraPayments++
			}
		}
		if g.rng.Float64() < 0.05 {
			g.add(i, yolfi.TypePaymentConfirmed, liveEP, live, inv, pay, roleReannounce, at(i))
		}
		if g.rng.Float64() < 0.05 {
			g.add(i, yolfi.TypeSubscriptionOverdue, liveEP, live, "", "", roleOther, at(i))
		}
	}
	// Fill up to nEvents with invoices that expire or are cancelled unpaid
	// (test-mode ones for test-only orders), for Yolfi orders.
	abandoned := make([]int, nOrders)
	for len(w.events) < nEvents {
		i := g.rng.IntN(nOrders)
		o := w.orders[i]
		if o.tbank || o.sub != nil {
			continue
		}
		inv := fmt.Sprintf("inv_%s_a%d", o.mid, abandoned[i])
		abandoned[i]++
		kind, role := live, roleAbandoned
		if o.testOnly {
			kind, role = g.testKind(), roleTest
		}
		end := yolfi.TypeInvoiceOverdue
		if g.rng.Float64() < 0.3 {
			end = yolfi.TypeInvoiceCancelled
		}
		g.add(i, yolfi.TypeInvoiceCreated, liveEP, kind, inv, "", role, at(i))
		g.add(i, end, liveEP, g.sameMode(kind), inv, "", role, at(i))
	}
	w.stats.Orders, w.stats.Events = len(w.orders), len(w.events)

	// Deliveries: each event once at its time; 20% once more (every
	// refund and renewal) — a third of those at the same moment (concurrent
	// duplicates), the rest later. A T-Bank notification's copies spell
	// PaymentId either way.
	for i, e := range w.events {
		w.deliveries = append(w.deliveries, g.delivery(i, e.at))
		if g.rng.Float64() >= 0.2 && e.role != roleRefund && e.role != roleRenewal && e.role != roleFirst {
			continue
		}
		if g.rng.Float64() < 1.0/3 {
			copies := 1
			if g.rng.Float64() < 0.1 {
				copies = 3 // a burst
			}
			for range copies {
				w.deliveries = append(w.deliveries, g.delivery(i, e.at))
				w.stats.Redeliveries++
				w.stats.Concurrent++
			}
			continue
		}
		later := min(e.at+g.uniform(50*time.Millisecond, window*3/10), window)
		w.deliveries = append(w.deliveries, g.delivery(i, later))
		w.stats.Redeliveries++
	}
	// Stable: copies planned for one moment stay adjacent, so they are
	// dispatched together.
	slices.SortStableFunc(w.deliveries, func(a, b delivery) int { return cmp.Compare(a.at, b.at) })
	w.stats.Deliveries = len(w.deliveries)
	for _, e := range w.events {
		if e.testMode {
			w.stats.TestModeEvents++
		}
	}
}

// delivery is a sending of event i at at, in either spelling when it has
// two.
func (g *generator) delivery(i int, at time.Duration) delivery {
	return delivery{ev: i, at: at, alt: g.w.events[i].alt != nil && g.rng.IntN(2) == 0}
}

// eventKind says how an event marks itself live or test.
type eventKind int

const (
	live           eventKind = iota // livemode true (or absent), evt_ id
	liveAbsent                      // livemode absent, evt_ id
	testLivemode                    // livemode false, evt_ id
	testID                          // livemode true, evt_test_ id (a dashboard test event)
	testBoth                        // livemode false, evt_test_ id
	numTestKindsTo                  // bound for random choice
)

func (g *generator) testKind() eventKind {
	return eventKind(int(testLivemode) + g.rng.IntN(int(numTestKindsTo-testLivemode)))
}

// sameMode returns a kind of the same mode (live or test) as k, varied.
func (g *generator) sameMode(k eventKind) eventKind {
	if k >= testLivemode {
		return g.testKind()
	}
	return k
}

// add plans one event of order i.
func (g *generator) add(i int, typ, endpoint string, kind eventKind, invoice, payment, role string, at time.Duration) {
	o := g.w.orders[i]
	if kind == live && g.rng.IntN(4) == 0 {
		kind = liveAbsent
	}
	e := &eventPlan{
		order: i, typ: typ, endpoint: endpoint, invoice: invoice, payment: payment,
		role: role, at: at, testMode: kind >= testLivemode,
	}
	p := yolfi.Payload{
		ID: g.hexID("evt_"), Type: typ, OrgID: orgID,
		CreatedAt: g.base.Add(at).Format(time.RFC3339),
		Data:      yolfi.PayloadData{InvoiceID: invoice, MerchantOrderID: o.mid},
	}
	switch kind {
	case live:
		p.Livemode = ptr(true)
	case testLivemode:
		p.Livemode = ptr(false)
	case testID:
		p.ID, p.Livemode = g.hexID(yolfi.TestEventIDPrefix), ptr(true)
	case testBoth:
		p.ID, p.Livemode = g.hexID(yolfi.TestEventIDPrefix), ptr(false)
	case liveAbsent:
		// No livemode member: Livemode stays nil.
	case numTestKindsTo:
		panic("numTestKindsTo bounds the kinds; it is not one")
	}
	switch typ {
	case yolfi.TypePaymentConfirmed:
		p.Data.PaymentID = payment
		p.Data.Amount, p.Data.Token, p.Data.Network = payAmount, payToken, payNetwork
		p.Data.TxHash = g.hexID("0x")
	case yolfi.TypeSubscriptionOverdue:
		p.Data.SubscriptionID = "sub_" + o.mid
	}
	e.id = p.ID
	var err error
	if e.body, err = json.Marshal(p); err != nil {
		panic(err) // a struct of strings always marshals
	}
	g.w.events = append(g.w.events, e)
}

// probeEvent builds a fresh live invoice.created that matches no order: an
// outage probe, harmless when stored (unmatched).
func probeEvent(n int) *eventPlan {
	p := yolfi.Payload{
		ID: yolfi.NewID("evt_probe_"), Type: yolfi.TypeInvoiceCreated, Livemode: ptr(true), OrgID: orgID,
		CreatedAt: time.Now().UTC().Format(time.RFC3339),
		Data:      yolfi.PayloadData{InvoiceID: fmt.Sprintf("inv_probe_%d", n), MerchantOrderID: fmt.Sprintf("chaos-probe-%d", n)},
	}
	body, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return &eventPlan{id: p.ID, order: -1, typ: p.Type, endpoint: liveEP, invoice: p.Data.InvoiceID, role: roleProbe, body: body}
}

// hexID is prefix followed by 24 hex digits from the seeded generator.
func (g *generator) hexID(prefix string) string {
	return fmt.Sprintf("%s%016x%08x", prefix, g.rng.Uint64(), g.rng.Uint32())
}

// uniform is a random duration in [lo, hi).
func (g *generator) uniform(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(g.rng.Int64N(int64(hi-lo)))
}

func ptr[T any](v T) *T { return &v }
