package fulfillment

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The batch fixtures: org_a's live T-Bank orders priced 1000 RUB, and
// subscriptions to the monthly plan.
const batchOrg = "org_a"

func batchEvent(id string, kind EventKind, merchantOrderID, payment string, minor int64) BatchEvent {
	p := PaymentInfo{PaymentID: payment, MerchantOrderID: merchantOrderID, Amount: MinorAmount(minor, "RUB")}
	p.AttemptRef = p.Attempt()
	return BatchEvent{Received: jan1, Event: ProviderEvent{Provider: ProviderTBank, OrgID: batchOrg, Environment: EnvLive,
		EventID: id, Kind: kind, Type: string(kind), OccurredAt: jan1, Payment: p}}
}

// testMode returns be as a provider's test event.
func testMode(be BatchEvent) BatchEvent {
	be.Event.TestMode = true
	return be
}

// named returns be naming the provider subscription sub.
func named(be BatchEvent, sub string) BatchEvent {
	be.Event.Payment.SubscriptionID = sub
	return be
}

func batchOrder(id string) *LockedOrder {
	return &LockedOrder{ID: id, PaidOrder: PaidOrder{State: StatePendingPayment, Total: Money{Currency: "RUB", MinorUnits: 1000}}}
}

// subscriptionOrder is batchOrder(id) with a subscription line of the
// monthly plan for customer.
func subscriptionOrder(id, customer string) *LockedOrder {
	o := batchOrder(id)
	o.HasSubscriptionLines, o.SubscriptionPlan, o.SubscriptionFor = true, monthly.ID, customer
	return o
}

// decided is DecideBatch of snap and evs, which must need no subscription
// created first.
func decided(t *testing.T, snap *Snapshot, evs []BatchEvent) []Step {
	t.Helper()
	steps, need, err := DecideBatch(snap, evs)
	if err != nil || need != nil {
		t.Fatalf("DecideBatch: %v, needs %v", err, need)
	}
	return steps
}

// summaries are the steps' summaries, in order.
func summaries(steps []Step) []string {
	var got []string
	for _, st := range steps {
		got = append(got, summary(st))
	}
	return got
}

func orderKey(merchantOrderID string) OrderKey {
	return OrderKey{OrgID: batchOrg, Environment: EnvLive, Field: ByMerchantOrderID, Value: merchantOrderID}
}

func subKey(id string) SubscriptionKey {
	return SubscriptionKey{OrgID: batchOrg, Environment: EnvLive, Provider: ProviderTBank, ID: id}
}

func batchSub(id, providerID string) *SubscriptionRecord {
	return &SubscriptionRecord{ID: id, SubscriptionRef: SubscriptionRef{OrgID: batchOrg, Environment: EnvLive,
		Provider: ProviderTBank, ProviderSubscriptionID: providerID, PlanID: monthly.ID}}
}

// summary is a step as one line: its decision, the rules that decided it
// (order or subscription), the order's id, and the subscription's id.
func summary(st Step) string {
	parts := []string{string(st.Outcome.Decision)}
	if st.Order != nil {
		parts = append(parts, "order="+st.Order.ID)
	}
	if sub := st.Subscription; sub != nil {
		parts = append(parts, "sub="+sub.Record.ID, "sub:"+string(sub.Outcome.Decision))
	}
	return strings.Join(parts, " ")
}

// Every event is routed to the rules that decide it.
func TestDecideBatchRoutes(t *testing.T) {
	t.Parallel()
	testOnLive := named(batchEvent("e", EventPaymentConfirmed, "", "pay_9", 1000), "sub_1")
	testOnLive.Event.TestMode = true
	cases := []struct {
		name string
		ev   BatchEvent
		want string
	}{
		{"a payment of a known order: the order rules", batchEvent("e", EventPaymentConfirmed, "m-1", "pay_1", 1000), "fulfilled order=o1"},
		{"a payment of an order that also names a subscription: the order rules first",
			named(batchEvent("e", EventPaymentConfirmed, "m-1", "pay_1", 1000), "sub_1"), "fulfilled order=o1"},
		{"a charge of a known subscription no order matches: the subscription rules",
			named(batchEvent("e", EventPaymentConfirmed, "", "pay_2", 1000), "sub_1"), "renewed sub=s1 sub:renewed"},
		{"a lifecycle event of a known subscription", named(batchEvent("e", EventSubscriptionCancelled, "", "", 0), "sub_1"),
			"subscription_cancelled sub=s1 sub:subscription_cancelled"},
		{"a lifecycle event of an unknown subscription: unmatched",
			named(batchEvent("e", EventSubscriptionOverdue, "", "", 0), "sub_unknown"), "unmatched"},
		// An order it names too has no rule for it.
		{"a lifecycle event of a known subscription that also names an order: the subscription rules",
			named(batchEvent("e", EventSubscriptionCancelled, "m-1", "", 0), "sub_1"), "subscription_cancelled sub=s1 sub:subscription_cancelled"},
		{"an overdue of a known subscription that also names an order: the subscription rules",
			named(batchEvent("e", EventSubscriptionOverdue, "m-1", "", 0), "sub_1"), "past_due sub=s1 sub:past_due"},
		{"a lifecycle event of an unknown subscription that names an order: unmatched",
			named(batchEvent("e", EventSubscriptionCancelled, "m-1", "", 0), "sub_unknown"), "unmatched"},
		{"a charge of an unknown subscription: the order rules, which find no order",
			named(batchEvent("e", EventPaymentConfirmed, "", "pay_3", 1000), "sub_unknown"), "unmatched"},
		{"a provider's test event on a live endpoint naming a known subscription: the order rules", testOnLive, "test_mode_ignored"},
		{"an event of no order and no subscription", batchEvent("e", EventPaymentConfirmed, "m-nobody", "pay_4", 1000), "unmatched"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			snap := &Snapshot{
				Orders:        map[OrderKey]*LockedOrder{orderKey("m-1"): batchOrder("o1")},
				Subscriptions: map[SubscriptionKey]*SubscriptionRecord{subKey("sub_1"): batchSub("s1", "sub_1")},
				Plans:         Plans{monthly.ID: monthly},
			}
			steps := decided(t, snap, []BatchEvent{tc.ev})
			if got := summary(steps[0]); got != tc.want {
				t.Errorf("got  %s\nwant %s (reason: %s)", got, tc.want, steps[0].Outcome.Reason)
			}
		})
	}
}

// The refund of a payment that paid a period, naming no subscription and
// matching no order (a T-Bank refund of a recurrent charge), is the
// subscription's whose period that payment paid: RefundedPayments names
// the payment to lock it by, and the batch finds it by its periods. A
// refund matching an order is the order's to route.
func TestDecideBatchRefundOfAChargeNamingNoSubscription(t *testing.T) {
	t.Parallel()
	sub := batchSub("s1", "sub_1")
	sub.Periods = 2
	sub.Renewals = map[string]Renewal{
		"payment:pay_1": {Period: 1, PaymentID: "pay_1", Start: jan1.AddDate(0, -1, 0), End: jan1},
		"payment:pay_2": {Period: 2, PaymentID: "pay_2", Start: jan1, End: jan1.AddDate(0, 1, 0)},
	}
	snap := &Snapshot{
		Orders:        map[OrderKey]*LockedOrder{orderKey("m-1"): batchOrder("o1")},
		Subscriptions: map[SubscriptionKey]*SubscriptionRecord{subKey("sub_1"): sub},
		Plans:         Plans{monthly.ID: monthly},
	}
	charge := batchEvent("e1", EventRefunded, "", "pay_2", 1000)
	partial := batchEvent("e2", EventPartiallyRefunded, "", "pay_1", 500)
	unknown := batchEvent("e3", EventRefunded, "", "pay_9", 1000)
	ofOrder := batchEvent("e4", EventRefunded, "m-1", "pay_3", 1000)
	namedUnknown := named(batchEvent("e5", EventRefunded, "", "pay_8", 1000), "sub_1")
	evs := []BatchEvent{charge, partial, unknown, ofOrder, namedUnknown}
	var events []ProviderEvent
	for _, be := range evs {
		events = append(events, be.Event)
	}
	want := []RefundedPayment{{batchOrg, EnvLive, ProviderTBank, "pay_2"}, {batchOrg, EnvLive, ProviderTBank, "pay_1"},
		{batchOrg, EnvLive, ProviderTBank, "pay_9"}}
	if got := RefundedPayments(events, snap.Orders); !slices.Equal(got, want) {
		t.Errorf("RefundedPayments = %v, want %v", got, want)
	}
	steps := decided(t, snap, evs)
	wantSteps := []string{
		"subscription_refunded sub=s1 sub:subscription_refunded",
		"partially_refunded sub=s1 sub:partially_refunded",
		"unmatched",
		"refunded_before_payment order=o1",
		"unmatched sub=s1 sub:unmatched",
	}
	if got := summaries(steps); !slices.Equal(got, wantSteps) {
		t.Errorf("steps:\n got %q\nwant %q", got, wantSteps)
	}
	// The two unmatched refunds wait for a period paid by their payments.
	for _, be := range []BatchEvent{unknown, namedUnknown} {
		if p, ok := be.Event.WaitsForItsPayment(); !ok || p != be.Event.refundedPayment() {
			t.Errorf("%s waits for %v (%v), want its payment", be.Event.EventID, p, ok)
		}
	}
	if _, ok := batchEvent("e6", EventPaymentConfirmed, "", "pay_8", 1000).Event.WaitsForItsPayment(); ok {
		t.Errorf("a payment waits for its payment")
	}
}

// A payment of an order whose subscription line is for another plan than
// the subscription the payment names is refused: the order on hold with a
// plan_change item, and no period paid (no subscription step) — also for
// a subscription the batch created for an earlier order's payment. The
// line's plan, when it is the subscription's, pays a period as before.
func TestDecideBatchRefusesPlanChanges(t *testing.T) {
	t.Parallel()
	yearly := Plan{ID: "pro-yearly", Period: Period{Months: 12}, Grace: monthly.Grace}
	planOrder := func(id, plan, customer string) *LockedOrder {
		o := subscriptionOrder(id, customer)
		o.SubscriptionPlan = plan
		return o
	}
	cases := []struct {
		name     string
		plan     string // of the order's subscription line
		customer string // of the order's subscription line; the subscription's is user_42, when it has one
		created  bool   // the subscription is one the batch created
		unknown  bool   // the subscription has no customer
		want     string
	}{
		{"the subscription's plan: a period paid", monthly.ID, "user_42", false, false, "fulfilled order=o1 sub=s1 sub:renewed"},
		{"another plan: refused", yearly.ID, "user_42", false, false, "plan_change_refused order=o1"},
		{"another plan, of a subscription the batch created: refused", yearly.ID, "user_42", true, false, "plan_change_refused order=o1"},
		// A payment naming one customer's subscription does not pay a
		// period of it for another customer's order, whose customer would
		// get nothing.
		{"another customer's subscription: refused", monthly.ID, "user_7", false, false, "plan_change_refused order=o1"},
		{"another customer's, created by the batch: refused", monthly.ID, "user_7", true, false, "plan_change_refused order=o1"},
		{"a subscription of no known customer: a period paid", monthly.ID, "user_7", false, true, "fulfilled order=o1 sub=s1 sub:renewed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sub := batchSub("s1", "sub_1")
			if !tc.unknown {
				sub.CustomerRef = "user_42"
			}
			snap := &Snapshot{
				Orders:        map[OrderKey]*LockedOrder{orderKey("m-1"): planOrder("o1", tc.plan, tc.customer)},
				Subscriptions: map[SubscriptionKey]*SubscriptionRecord{subKey("sub_1"): sub},
				Created:       map[SubscriptionKey]*SubscriptionRecord{},
				Plans:         Plans{monthly.ID: monthly, yearly.ID: yearly},
			}
			if tc.created {
				snap.Created[subKey("sub_1")] = snap.Subscriptions[subKey("sub_1")]
				delete(snap.Subscriptions, subKey("sub_1"))
			}
			pay := named(batchEvent("e1", EventPaymentConfirmed, "m-1", "pay_1", 1000), "sub_1")
			again := named(batchEvent("e2", EventPaymentConfirmed, "m-1", "pay_1", 1000), "sub_1")
			steps := decided(t, snap, []BatchEvent{pay, again})
			if got := summary(steps[0]); got != tc.want {
				t.Errorf("got  %s\nwant %s (reason: %s)", got, tc.want, steps[0].Outcome.Reason)
			}
			if tc.want != "fulfilled order=o1 sub=s1 sub:renewed" {
				if item := steps[0].Outcome.Item(); item != ReconPlanChange || steps[0].OrderState != StateOnHold {
					t.Errorf("item %q, order %s; want a plan_change item and the order on hold", item, steps[0].OrderState)
				}
				if strings.Contains(steps[0].Outcome.Reason, tc.customer) {
					t.Errorf("reason %q names a customer", steps[0].Outcome.Reason)
				}
			}
			// The same payment again: the order is paid, nothing more.
			if got := summary(steps[1]); got != "already_applied order=o1" {
				t.Errorf("the payment again: %s", got)
			}
		})
	}
}

// The refund of the payment of an order's subscription line is decided by
// both rules: the order's, and the subscription's for the period it paid —
// when the batch holds the subscription (the refund names it).
func TestDecideBatchRefundOfASubscriptionLine(t *testing.T) {
	t.Parallel()
	order := subscriptionOrder("o1", "user_42")
	snap := &Snapshot{
		Orders:        map[OrderKey]*LockedOrder{orderKey("m-1"): order},
		Subscriptions: map[SubscriptionKey]*SubscriptionRecord{subKey("sub_1"): batchSub("s1", "sub_1")},
		Created:       map[SubscriptionKey]*SubscriptionRecord{},
		Plans:         Plans{monthly.ID: monthly},
	}
	refund := named(batchEvent("e2", EventRefunded, "m-1", "pay_1", 1000), "sub_1")
	refund.Event.OccurredAt = day(10)
	unnamed := batchEvent("e3", EventRefunded, "m-1", "pay_1", 1000)
	steps := decided(t, snap, []BatchEvent{named(batchEvent("e1", EventPaymentConfirmed, "m-1", "pay_1", 1000), "sub_1"), refund, unnamed})
	got := summaries(steps)
	want := []string{"fulfilled order=o1 sub=s1 sub:renewed", "refunded order=o1 sub=s1 sub:subscription_refunded", "already_applied order=o1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if rec := steps[1].Subscription.Record; rec.State != SubExpired || !rec.AccessEnded || !rec.PeriodEnd.Equal(day(10)) {
		t.Errorf("after the refund: %s, ended %v, until %s; want expired at the refund", rec.State, rec.AccessEnded, rec.PeriodEnd)
	}
}

// The refund of the payment that paid a subscription's period is about
// that subscription whatever it names: a refund naming no card binding,
// of a payment that named one (the order records the subscription it
// paid, PaidSubscription), ends the period's access as the named one
// does; a second refund is already applied.
func TestDecideBatchRefundOfThePaidSubscription(t *testing.T) {
	t.Parallel()
	order := subscriptionOrder("o1", "user_42")
	snap := &Snapshot{
		Orders:        map[OrderKey]*LockedOrder{orderKey("m-1"): order},
		Subscriptions: map[SubscriptionKey]*SubscriptionRecord{subKey("sub_1"): batchSub("s1", "sub_1")},
		Plans:         Plans{monthly.ID: monthly},
	}
	unnamed := batchEvent("e2", EventRefunded, "m-1", "pay_1", 1000)
	unnamed.Event.OccurredAt = day(10)
	steps := decided(t, snap, []BatchEvent{named(batchEvent("e1", EventPaymentConfirmed, "m-1", "pay_1", 1000), "sub_1"),
		unnamed, named(batchEvent("e3", EventRefunded, "m-1", "pay_1", 1000), "sub_1")})
	got := summaries(steps)
	want := []string{"fulfilled order=o1 sub=s1 sub:renewed", "refunded order=o1 sub=s1 sub:subscription_refunded", "already_applied order=o1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if o := steps[0].Order; o.PaidSubscription != "s1" {
		t.Errorf("the paid order records subscription %q, want s1", o.PaidSubscription)
	}

	// The same refund in a later batch: the order, paid, names its
	// subscription by id; the snapshot holds it under its provider key.
	paid := subscriptionOrder("o1", "user_42")
	paid.Apply(named(batchEvent("e1", EventPaymentConfirmed, "m-1", "pay_1", 1000), "sub_1").Event, steps[0].Outcome)
	paid.PaidSubscription = "s1"
	snap.Orders = map[OrderKey]*LockedOrder{orderKey("m-1"): paid}
	snap.Subscriptions = map[SubscriptionKey]*SubscriptionRecord{subKey("sub_1"): &steps[0].Subscription.Record}
	steps = decided(t, snap, []BatchEvent{unnamed})
	if len(steps) != 1 || summary(steps[0]) != "refunded order=o1 sub=s1 sub:subscription_refunded" {
		t.Fatalf("a later batch: %v; want the subscription's period refunded", steps)
	}
}

// A payment applied from an event that named no subscription (a bank's
// status answer names no card binding) paid a subscription under the id
// the service gave it. The bank's notification of the same payment names
// the binding: the subscription takes it, so that the recurrent charges
// that name it renew that subscription — once, and only when no other
// subscription goes by that id.
func TestDecideBatchBindsThePaidSubscription(t *testing.T) {
	t.Parallel()
	order := subscriptionOrder("o1", "cust_1")
	customer := CustomerSubscriptionID(monthly.ID, "cust_1")
	created := batchSub("s-new", customer)
	created.CustomerRef = "cust_1"
	snap := &Snapshot{
		Orders:  map[OrderKey]*LockedOrder{orderKey("m-1"): order},
		Created: map[SubscriptionKey]*SubscriptionRecord{subKey(customer): created},
		Plans:   Plans{monthly.ID: monthly},
	}
	polled := batchEvent("poll:e1", EventPaymentConfirmed, "m-1", "pay_1", 1000)
	notified := named(batchEvent("e1", EventPaymentConfirmed, "m-1", "pay_1", 1000), "101709")
	charge := named(batchEvent("e2", EventPaymentConfirmed, "", "pay_2", 1000), "101709")
	charge.Event.OccurredAt = day(30)
	events := []BatchEvent{polled, notified, named(batchEvent("e1-again", EventPaymentConfirmed, "m-1", "pay_1", 1000), "101709"), charge}
	steps := decided(t, snap, events)
	got := summaries(steps)
	want := []string{"fulfilled order=o1 sub=s-new sub:renewed", "already_applied order=o1 sub=s-new sub:already_applied",
		"already_applied order=o1", "renewed sub=s-new sub:renewed"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	bind := steps[1].Subscription
	if bind.Record.ProviderSubscriptionID != "101709" || !reflect.DeepEqual(bind.Outcome.Effects, []Effect{BindSubscription{"101709"}}) {
		t.Errorf("the binding step: %s, %v", bind.Record.ProviderSubscriptionID, bind.Outcome.Effects)
	}
	if !strings.Contains(steps[1].Outcome.Reason, "now known at tbank by 101709") {
		t.Errorf("the notification's reason %q does not say the subscription took the binding", steps[1].Outcome.Reason)
	}
	if p := steps[3].Subscription.Record.Periods; p != 2 {
		t.Errorf("the recurrent charge left %d periods, want 2", p)
	}
	if created.ProviderSubscriptionID != customer {
		t.Errorf("DecideBatch changed the snapshot's subscription: %+v", created)
	}

	// Another subscription goes by the binding already: nothing is bound.
	snap.Subscriptions = map[SubscriptionKey]*SubscriptionRecord{subKey("101709"): batchSub("s-other", "101709")}
	steps = decided(t, snap, events[:2])
	if len(steps) != 2 || summary(steps[1]) != "already_applied order=o1" {
		t.Fatalf("with 101709 taken: %v; want the notification already applied, nothing bound", steps)
	}
	// A payment of the order that is not the one that paid it binds nothing.
	other := named(batchEvent("e9", EventPaymentConfirmed, "m-1", "pay_9", 1000), "555")
	snap.Subscriptions = nil
	steps = decided(t, snap, []BatchEvent{polled, other})
	if len(steps) != 2 || steps[1].Subscription != nil {
		t.Fatalf("another payment: %v; want nothing bound", steps)
	}
}

// Two events of one order in one batch: the second is decided against
// what the first left, and the attempt's recorded state is threaded.
func TestDecideBatchThreadsAnOrder(t *testing.T) {
	t.Parallel()
	snap := &Snapshot{Orders: map[OrderKey]*LockedOrder{orderKey("m-1"): batchOrder("o1")}}
	steps, _, err := DecideBatch(snap, []BatchEvent{
		batchEvent("e1", EventPartiallyRefunded, "m-1", "pay_1", 250),
		batchEvent("e2", EventPaymentConfirmed, "m-1", "pay_1", 1000),
		batchEvent("e3", EventPaymentConfirmed, "m-1", "pay_1", 1000),
		batchEvent("e4", EventPartiallyRefunded, "m-1", "pay_1", 250),
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range steps {
		attempt := string(st.Attempt)
		if st.NewAttempt {
			attempt += "+new"
		}
		got = append(got, string(st.Outcome.Decision)+"/"+attempt+"/"+string(st.OrderState))
	}
	// Each step says the state its event left the order in; the order
	// is held once, as the whole batch leaves it. The attempt is new to
	// the first event that records it.
	want := []string{"partially_refunded//pending_payment", "fulfilled/confirmed+new/fulfilled",
		"already_applied/confirmed/fulfilled", "already_applied//fulfilled"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decisions/attempts/states = %v, want %v", got, want)
	}
	if steps[0].Order != steps[3].Order || steps[0].Order.State != StateFulfilled {
		t.Errorf("the steps hold the order %p (%s) and %p: want one order, as the batch leaves it", steps[0].Order, steps[0].Order.State, steps[3].Order)
	}
	// The confirmation takes back the share of the refund decided before
	// it in the same batch, and asks what to revoke of the rest.
	if effects := steps[1].Outcome.Effects; !reflect.DeepEqual(effects[len(effects)-2:], []Effect{
		ReverseCreditShare{Money{"RUB", 250}, RefundRefOf(ProviderTBank, "pay_1", MinorAmount(250, "RUB"))},
		OpenItem{ReconRefundAfterFulfill}}) {
		t.Errorf("the confirmation's effects %+v do not end with the refund's share and an item", effects)
	}
	if o := snap.Orders[orderKey("m-1")]; o.Paid || len(o.PartialRefunds) != 0 || len(o.Attempts) != 0 {
		t.Errorf("DecideBatch changed the snapshot's order: %+v", o)
	}
}

// An attempt the snapshot holds (a payment the service started) is not
// new to the event that confirms it.
func TestDecideBatchKnownAttempt(t *testing.T) {
	t.Parallel()
	o := batchOrder("o1")
	o.Attempts = map[AttemptKey]AttemptState{{ProviderTBank, "pay_1"}: AttemptCreated}
	snap := &Snapshot{Orders: map[OrderKey]*LockedOrder{orderKey("m-1"): o}}
	steps, _, err := DecideBatch(snap, []BatchEvent{batchEvent("e1", EventPaymentConfirmed, "m-1", "pay_1", 1000)})
	if err != nil {
		t.Fatal(err)
	}
	if st := steps[0]; st.Attempt != AttemptConfirmed || st.NewAttempt {
		t.Errorf("attempt %q, new %v; want confirmed, not new", st.Attempt, st.NewAttempt)
	}
}

// Two charges of one subscription in one batch pay two periods.
func TestDecideBatchThreadsASubscription(t *testing.T) {
	t.Parallel()
	snap := &Snapshot{
		Subscriptions: map[SubscriptionKey]*SubscriptionRecord{subKey("sub_1"): batchSub("s1", "sub_1")},
		Plans:         Plans{monthly.ID: monthly},
	}
	second := named(batchEvent("e2", EventPaymentConfirmed, "", "pay_2", 1000), "sub_1")
	second.Event.OccurredAt = day(30)
	steps, _, err := DecideBatch(snap, []BatchEvent{
		named(batchEvent("e1", EventPaymentConfirmed, "", "pay_1", 1000), "sub_1"),
		second,
		named(batchEvent("e1-again", EventPaymentConfirmed, "", "pay_1", 1000), "sub_1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range steps {
		got = append(got, summary(st)+" periods="+string(rune('0'+st.Subscription.Record.Periods)))
	}
	want := []string{"renewed sub=s1 sub:renewed periods=1", "renewed sub=s1 sub:renewed periods=2",
		"already_applied sub=s1 sub:already_applied periods=2"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	if s := snap.Subscriptions[subKey("sub_1")]; s.Periods != 0 || len(s.Renewals) != 0 {
		t.Errorf("DecideBatch changed the snapshot's subscription: %+v", s)
	}
}

// The payment of an order's subscription line pays a subscription the
// snapshot does not hold: DecideBatch asks for it, and once storage created
// it, the payment creates its first period — and the subscription exists
// for the events after that payment, not before.
func TestDecideBatchCreatesASubscription(t *testing.T) {
	t.Parallel()
	order := subscriptionOrder("o1", "cust_1")
	ref := SubscriptionRef{OrgID: batchOrg, Environment: EnvLive, Provider: ProviderTBank,
		ProviderSubscriptionID: CustomerSubscriptionID(monthly.ID, "cust_1"), CustomerRef: "cust_1", PlanID: monthly.ID}
	snap := &Snapshot{
		Orders:  map[OrderKey]*LockedOrder{orderKey("m-1"): order},
		Created: map[SubscriptionKey]*SubscriptionRecord{},
		Plans:   Plans{monthly.ID: monthly},
	}
	cancelBefore := named(batchEvent("e0", EventSubscriptionCancelled, "", "", 0), ref.ProviderSubscriptionID)
	pay := batchEvent("e1", EventPaymentConfirmed, "m-1", "pay_1", 1000)
	cancelAfter := named(batchEvent("e2", EventSubscriptionCancelled, "", "", 0), ref.ProviderSubscriptionID)
	cancelAfter.Event.OccurredAt = day(1)
	events := []BatchEvent{cancelBefore, pay, cancelAfter}

	steps, need, err := DecideBatch(snap, events)
	if err != nil || steps != nil || need == nil || *need != ref {
		t.Fatalf("DecideBatch = %v steps, needs %+v, %v; want no steps and a request for %+v", len(steps), need, err, ref)
	}
	created := &SubscriptionRecord{ID: "s-new", SubscriptionRef: ref}
	snap.Created[ref.Key()] = created
	steps, need, err = DecideBatch(snap, events)
	if err != nil || need != nil {
		t.Fatalf("DecideBatch again: %v, needs %v", err, need)
	}
	got := summaries(steps)
	want := []string{"unmatched", "fulfilled order=o1 sub=s-new sub:renewed", "subscription_cancelled sub=s-new sub:subscription_cancelled"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	if created.Periods != 0 {
		t.Errorf("DecideBatch changed the created subscription: %+v", created)
	}
}

// A subscription whose plan left the configuration fails the batch: its
// events wait until the plan is back.
func TestDecideBatchPlanNotConfigured(t *testing.T) {
	t.Parallel()
	snap := &Snapshot{Subscriptions: map[SubscriptionKey]*SubscriptionRecord{subKey("sub_1"): batchSub("s1", "sub_1")}}
	_, _, err := DecideBatch(snap, []BatchEvent{named(batchEvent("e", EventPaymentConfirmed, "", "pay_1", 1000), "sub_1")})
	if err == nil || !strings.Contains(err.Error(), `plan "pro-monthly", which is not configured`) {
		t.Errorf("DecideBatch = %v, want the plan named", err)
	}
}

// The subscriptions a batch is decided against: those its events name,
// and the subscription of each matched order with a subscription line,
// under the service's own id when the event names none; each once.
func TestSubscriptionKeys(t *testing.T) {
	t.Parallel()
	plain := batchOrder("o-plain")
	sub := subscriptionOrder("o-sub", "user_1")
	paid := subscriptionOrder("o-paid", "user_1")
	paid.PaidSubscription = "s-paid"
	orders := map[OrderKey]*LockedOrder{orderKey("m-plain"): plain, orderKey("m-sub"): sub, orderKey("m-paid"): paid}
	customer := subKey(CustomerSubscriptionID(monthly.ID, "user_1"))
	for _, tc := range []struct {
		name   string
		events []BatchEvent
		want   []SubscriptionKey
		ids    []string
	}{
		{"an order without a subscription line", []BatchEvent{batchEvent("e1", EventRefunded, "m-plain", "p1", 1000)}, nil, nil},
		{"no order", []BatchEvent{batchEvent("e1", EventRefunded, "m-nobody", "p1", 1000)}, nil, nil},
		{"named, no order", []BatchEvent{named(batchEvent("e1", EventSubscriptionCancelled, "", "p1", 1000), "sub_1")}, []SubscriptionKey{subKey("sub_1")}, nil},
		{"a subscription order's refund naming none", []BatchEvent{batchEvent("e1", EventRefunded, "m-sub", "p1", 1000)},
			[]SubscriptionKey{customer}, nil},
		{"a subscription order's payment naming its subscription", []BatchEvent{named(batchEvent("e1", EventPaymentConfirmed, "m-sub", "p1", 1000), "sub_1")},
			[]SubscriptionKey{subKey("sub_1")}, nil},
		{"each once, in the events' order", []BatchEvent{
			batchEvent("e1", EventPaymentConfirmed, "m-sub", "p1", 1000),
			named(batchEvent("e2", EventSubscriptionCancelled, "", "p2", 1000), "sub_2"),
			batchEvent("e3", EventRefunded, "m-sub", "p1", 1000),
		}, []SubscriptionKey{customer, subKey("sub_2")}, nil},
		{"a paid order's refund: also the subscription it paid, by id, once", []BatchEvent{
			named(batchEvent("e1", EventRefunded, "m-paid", "p1", 1000), "sub_1"),
			batchEvent("e2", EventRefunded, "m-paid", "p1", 1000),
		}, []SubscriptionKey{subKey("sub_1"), customer}, []string{"s-paid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			evs := make([]ProviderEvent, len(tc.events))
			for i, be := range tc.events {
				evs[i] = be.Event
			}
			if got, ids := SubscriptionKeys(evs, orders); !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(ids, tc.ids) {
				t.Errorf("SubscriptionKeys = %v, %v; want %v, %v", got, ids, tc.want, tc.ids)
			}
		})
	}
}

// A registered subscription's first payment that names a merchant order
// the batch does not hold: the subscription rules take it as a renewal,
// and the step says it awaits that order while it is the payment of the
// subscription's first period, not refunded — announced again too, so
// that its transaction takes the order's late-match lock. Decided again
// once the order exists, it pays the order when the order's subscription
// line pays that subscription, and the subscription rules find its period
// paid already: nothing paid twice; when it does not fit that order, the
// order stays unpaid, an item open. For any other order (no subscription
// line), and for a later charge naming the order, the payment stays the
// subscription's: the order takes nothing of it, and its refund is the
// subscription rules' as without an order. Refunded before the order came,
// it pays nothing; refunded while the order is unpaid, its period is
// refunded by the subscription rules.
func TestDecideBatchPaymentBeforeItsOrder(t *testing.T) {
	t.Parallel()
	pay := named(batchEvent("e1", EventPaymentConfirmed, "m-1", "pay_1", 1000), "sub_1")
	refund := named(batchEvent("e1", EventRefunded, "m-1", "pay_1", 1000), "sub_1")
	license := func() *LockedOrder { return batchOrder("o1") }
	subscribed := func() *LockedOrder { return subscriptionOrder("o1", "user_42") }
	dearer := func() *LockedOrder { o := subscribed(); o.Total.MinorUnits = 1500; return o }
	paidByPay0 := func() *LockedOrder {
		o := subscribed()
		o.State, o.Paid, o.PaidBy, o.PaidSubscription = StateFulfilled, true, PaidRefs{AttemptRef: "pay_0", PaymentID: "pay_0"}, "s1"
		return o
	}
	cases := []struct {
		name string
		ev   BatchEvent
		// period is what pay_1 paid: "" nothing; "first", "refunded":
		// period 1 (refunded); "second": period 2, period 1 paid by
		// pay_0; "other": nothing, period 1 paid by pay_0.
		period  string
		order   func() *LockedOrder // the order m-1 the batch holds, nil for none
		want    string
		awaited string // the merchant order the step awaits
		paid    bool   // the order paid, after the step
		item    ReconKind
	}{
		{"before its order: a renewal awaiting the order", pay, "", nil, "renewed sub=s1 sub:renewed", "m-1", false, ""},
		{"naming no merchant order: a renewal awaiting none",
			named(batchEvent("e1", EventPaymentConfirmed, "", "pay_1", 1000), "sub_1"), "", nil, "renewed sub=s1 sub:renewed", "", false, ""},
		{"announced again before its order: paid already, still awaiting it", pay, "first", nil,
			"already_applied sub=s1 sub:already_applied", "m-1", false, ""},
		{"announced again before its order, refunded: awaiting none", pay, "refunded", nil,
			"already_applied sub=s1 sub:already_applied", "", false, ""},
		{"a later charge naming the order: a renewal awaiting none", pay, "other", nil, "renewed sub=s1 sub:renewed", "", false, ""},
		{"a later charge announced again: awaiting none", pay, "second", nil,
			"already_applied sub=s1 sub:already_applied", "", false, ""},
		{"once its order exists: the order fulfilled, the period paid already", pay, "first", subscribed,
			"fulfilled order=o1 sub=s1 sub:already_applied", "", true, ""},
		{"once its order exists, refunded before: nothing paid", pay, "refunded", subscribed, "stale_ignored order=o1", "", false, ""},
		{"its refund while the order is unpaid: the period refunded", refund, "first", subscribed,
			"refunded_before_payment order=o1 sub=s1 sub:subscription_refunded", "", false, ""},
		{"once an order of another price exists: the order unpaid, an item", pay, "first", dearer,
			"amount_mismatch order=o1", "", false, ReconAmountMismatch},
		{"then its refund: the period refunded", refund, "first", dearer,
			"refunded_before_payment order=o1 sub=s1 sub:subscription_refunded", "", false, ""},
		{"once an order with no subscription line exists: the subscription's still", pay, "first", license,
			"already_applied order=o1", "", false, ""},
		{"then its refund: the period refunded", refund, "first", license,
			"refunded_before_payment order=o1 sub=s1 sub:subscription_refunded", "", false, ""},
		{"a later charge once its order exists: the subscription's still", pay, "second", subscribed,
			"already_applied order=o1", "", false, ""},
		{"a later charge once the order is paid: the subscription's renewal, no extra payment", pay, "second", paidByPay0,
			"already_applied sub=s1 sub:already_applied", "", true, ""},
		{"its refund once the order is paid: the period refunded", refund, "second", paidByPay0,
			"other_payment_refunded order=o1 sub=s1 sub:subscription_refunded", "", true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sub := batchSub("s1", "sub_1")
			month := func(n int, payment string, refunded bool) Renewal {
				return Renewal{Period: n, PaymentID: payment, Start: jan1.AddDate(0, n-1, 0), End: jan1.AddDate(0, n, 0), Refunded: refunded}
			}
			switch tc.period {
			case "first", "refunded":
				sub.State, sub.Periods, sub.PeriodStart, sub.PeriodEnd = SubActive, 1, jan1, jan1.AddDate(0, 1, 0)
				sub.Renewals = map[string]Renewal{"payment:pay_1": month(1, "pay_1", tc.period == "refunded")}
			case "other":
				sub.State, sub.Periods, sub.PeriodStart, sub.PeriodEnd = SubActive, 1, jan1, jan1.AddDate(0, 1, 0)
				sub.Renewals = map[string]Renewal{"payment:pay_0": month(1, "pay_0", false)}
			case "second":
				sub.State, sub.Periods, sub.PeriodStart, sub.PeriodEnd = SubActive, 2, jan1.AddDate(0, 1, 0), jan1.AddDate(0, 2, 0)
				sub.Renewals = map[string]Renewal{"payment:pay_0": month(1, "pay_0", false), "payment:pay_1": month(2, "pay_1", false)}
			}
			snap := &Snapshot{Orders: map[OrderKey]*LockedOrder{},
				Subscriptions: map[SubscriptionKey]*SubscriptionRecord{subKey("sub_1"): sub}, Plans: Plans{monthly.ID: monthly}}
			if tc.order != nil {
				snap.Orders[orderKey("m-1")] = tc.order()
			}
			st := decided(t, snap, []BatchEvent{tc.ev})[0]
			if got := summary(st); got != tc.want {
				t.Errorf("got  %s\nwant %s (reason: %s)", got, tc.want, st.Outcome.Reason)
			}
			awaited := ""
			if st.AwaitedOrder != nil {
				if *st.AwaitedOrder != orderKey(st.AwaitedOrder.Value) {
					t.Errorf("awaits %+v, not an order of the event's org by merchant order id", *st.AwaitedOrder)
				}
				awaited = st.AwaitedOrder.Value
			}
			if awaited != tc.awaited {
				t.Errorf("awaits order %q, want %q", awaited, tc.awaited)
			}
			if st.Order != nil {
				if st.Order.Paid != tc.paid {
					t.Errorf("the order paid: %v, want %v", st.Order.Paid, tc.paid)
				}
				if st.OrderState == StateFulfilled && st.Order.PaidSubscription != "s1" {
					t.Errorf("the order records it paid subscription %q, want s1", st.Order.PaidSubscription)
				}
			}
			var items []ReconKind
			for _, e := range st.Outcome.Effects {
				if it, ok := e.(OpenItem); ok {
					items = append(items, it.Kind)
				}
				if _, ok := e.(GrantLicenses); ok && !tc.paid {
					t.Error("licenses granted to an order the payment did not pay")
				}
			}
			if tc.item == "" && len(items) > 0 || tc.item != "" && !slices.Equal(items, []ReconKind{tc.item}) {
				t.Errorf("items %v, want %q", items, tc.item)
			}
		})
	}
}

// A charge of the subscription a paid order's payment paid that names the
// order too (a provider copies the first checkout's merchant order id into
// its renewals) is decided by the subscription rules as a renewal, as if
// no order matched: it pays the next period once per bill, or is an extra
// payment where the subscription's rules say so (cancelled before it); the
// order takes nothing of it — no step of the order, no effect, its payment
// and attempts as they were. A payment naming no subscription, or another
// one, is still the order's second payment; the order's own payment again
// is already applied to it; a payment that cannot be told from the order's
// is still one for a person to check; and an unpaid order is paid by it.
// The charge's refund, naming the order alone, is the subscription's too.
func TestDecideBatchChargeOfThePaidSubscription(t *testing.T) {
	t.Parallel()
	feb1 := jan1.AddDate(0, 1, 0)
	at := func(be BatchEvent, when time.Time) BatchEvent {
		be.Event.OccurredAt = when
		return be
	}
	charge := func(id string) BatchEvent {
		return at(named(batchEvent(id, EventPaymentConfirmed, "m-1", "pay_2", 1000), "sub_1"), feb1)
	}
	own := named(batchEvent("e1-again", EventPaymentConfirmed, "m-1", "pay_1", 1000), "sub_1")
	paid := func() *LockedOrder {
		o := subscriptionOrder("o1", "user_42")
		o.State, o.Paid, o.PaidBy, o.PaidSubscription = StateFulfilled, true, PaidRefs{AttemptRef: "pay_1", PaymentID: "pay_1"}, "s1"
		o.Attempts = map[AttemptKey]AttemptState{{ProviderTBank, "pay_1"}: AttemptConfirmed}
		return o
	}
	cases := []struct {
		name    string
		order   func() *LockedOrder
		events  []BatchEvent
		want    []string
		periods int // of s1, after the batch
		items   []ReconKind
	}{
		{"a charge naming the order and its subscription: renewed, the order untouched", paid,
			[]BatchEvent{charge("e2"), own}, []string{"renewed sub=s1 sub:renewed", "already_applied order=o1"}, 2, nil},
		{"the same charge twice: one period", paid, []BatchEvent{charge("e2"), charge("e2-again")},
			[]string{"renewed sub=s1 sub:renewed", "already_applied sub=s1 sub:already_applied"}, 2, nil},
		{"a charge naming another subscription: the order's second payment", paid,
			[]BatchEvent{named(charge("e2"), "sub_2")}, []string{"duplicate_payment order=o1"}, 1, []ReconKind{ReconExtraPayment}},
		{"a charge naming no subscription: the order's second payment", paid,
			[]BatchEvent{named(charge("e2"), "")}, []string{"duplicate_payment order=o1"}, 1, []ReconKind{ReconExtraPayment}},
		{"the order's own payment again: already applied", paid, []BatchEvent{own}, []string{"already_applied order=o1"}, 1, nil},
		{"a charge that cannot be told from the order's payment: for a person to check", func() *LockedOrder {
			o := paid()
			o.PaidBy = PaidRefs{}
			return o
		}, []BatchEvent{charge("e2")}, []string{"unidentified_payment order=o1"}, 1, []ReconKind{ReconUnidentifiedPayment}},
		{"the order unpaid: paid by the charge", func() *LockedOrder { return subscriptionOrder("o1", "user_42") },
			[]BatchEvent{charge("e2")}, []string{"fulfilled order=o1 sub=s1 sub:renewed"}, 2, nil},
		{"the subscription cancelled before the charge: an extra payment of the subscription's", paid,
			[]BatchEvent{at(named(batchEvent("e0", EventSubscriptionCancelled, "", "", 0), "sub_1"), day(20)), charge("e2")},
			[]string{"subscription_cancelled sub=s1 sub:subscription_cancelled", "duplicate_payment sub=s1 sub:duplicate_payment"},
			1, []ReconKind{ReconExtraPayment}},
		{"the charge's refund naming the order alone: its period refunded", paid,
			[]BatchEvent{charge("e2"), at(batchEvent("e3", EventRefunded, "m-1", "pay_2", 1000), feb1.AddDate(0, 0, 3))},
			[]string{"renewed sub=s1 sub:renewed", "other_payment_refunded order=o1 sub=s1 sub:subscription_refunded"}, 2, nil},
		{"a provider's test refund of the charge on a live endpoint: ignored, its period kept", paid,
			[]BatchEvent{charge("e2"), testMode(at(batchEvent("e3", EventRefunded, "m-1", "pay_2", 1000), feb1.AddDate(0, 0, 3)))},
			[]string{"renewed sub=s1 sub:renewed", "test_mode_ignored order=o1"}, 2, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sub := batchSub("s1", "sub_1")
			sub.State, sub.Periods, sub.PeriodStart, sub.PeriodEnd, sub.LastEventAt = SubActive, 1, jan1, feb1, jan1
			sub.Renewals = map[string]Renewal{"payment:pay_1": {Period: 1, PaymentID: "pay_1", Start: jan1, End: feb1, PaidAt: jan1, Purchase: true}}
			snap := &Snapshot{
				Orders: map[OrderKey]*LockedOrder{orderKey("m-1"): tc.order()},
				Subscriptions: map[SubscriptionKey]*SubscriptionRecord{subKey("sub_1"): sub,
					subKey("sub_2"): batchSub("s2", "sub_2")},
				Plans: Plans{monthly.ID: monthly},
			}
			steps := decided(t, snap, tc.events)
			if got := summaries(steps); !slices.Equal(got, tc.want) {
				t.Errorf("steps:\n got %q\nwant %q", got, tc.want)
			}
			periods := sub.Periods
			var items []ReconKind
			for _, st := range steps {
				if st.Subscription != nil && st.Subscription.Record.ID == "s1" {
					periods = st.Subscription.Record.Periods
				}
				if st.AwaitedOrder != nil {
					t.Errorf("%s awaits order %v", st.Outcome.Decision, *st.AwaitedOrder)
				}
				if st.Order == nil && (st.Subscription == nil || !reflect.DeepEqual(st.Outcome, st.Subscription.Outcome)) {
					t.Errorf("a step of no order decided %+v, not by the subscription rules", st.Outcome)
				}
				for _, e := range st.Outcome.Effects {
					if it, ok := e.(OpenItem); ok {
						items = append(items, it.Kind)
					}
				}
			}
			if periods != tc.periods {
				t.Errorf("s1 has %d periods, want %d", periods, tc.periods)
			}
			if !slices.Equal(items, tc.items) {
				t.Errorf("items %v, want %v", items, tc.items)
			}
			// The order as the batch leaves it, when a step shows it: a
			// paid order still paid by its own payment, and the charge no
			// attempt of it unless the order rules decided the charge.
			for i, st := range steps {
				if o := st.Order; o != nil && o.Paid && o.PaidBy.PaymentID == "pay_1" && st.Outcome.Decision == DecisionAlreadyApplied {
					if _, ok := o.Attempts[AttemptKey{ProviderTBank, "pay_2"}]; ok || o.State != StateFulfilled {
						t.Errorf("step %d: the order %s, attempts %v; want it fulfilled, no attempt of the charge", i, o.State, o.Attempts)
					}
				}
			}
			if o := snap.Orders[orderKey("m-1")]; o.Attempts[AttemptKey{ProviderTBank, "pay_2"}] != "" {
				t.Errorf("DecideBatch changed the snapshot's order: %+v", o)
			}
		})
	}
}
