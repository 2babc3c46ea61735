package fulfillment

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// The rules are table-tested case by case; these fuzz targets tell them
// whole stories. The fuzz input chooses an order (and, in the second, a
// subscription), a few payments of it, and a story of their events —
// confirmations, the same payment announced again under other keys,
// refunds in full and in part, attempts created, expired and cancelled,
// subscription events, provider test events, events of unknown types,
// replays — delivered in a random order and split into random batches.
// Each batch is decided against a snapshot built from a model of what
// storage keeps (story_model_test.go), and its effects are written to it.
// Then:
//
//  1. the same deliveries, decided in one batch, one event per batch and
//     split at random, end alike: the same money written, the same items,
//     events and messages, the same last decision of every event (less
//     where storage decides events again once their subscription exists:
//     see checkStory);
//  2. deciding every event again after the story (a replay) writes nothing
//     new;
//  3. money stays within bounds: a line granted once, only by a confirmed
//     payment of what the order expects that is no test event on a live
//     endpoint; no credit taken back beyond what was credited; a paying
//     payment's refunds recorded within what it paid; a refunded order
//     keeps nothing granted;
//  4. nothing storage would refuse or lose: a key written twice (an
//     order event, a grant, a period, an attempt), a row updated that
//     does not exist;
//  5. no panic, and no error (every plan is configured).

// storyBytes reads a story's choices from the fuzz input, one byte each:
// 0 once the input runs out, so that every input is a story.
type storyBytes struct{ b []byte }

// pick is the next choice among n.
func (r *storyBytes) pick(n int) int {
	if len(r.b) == 0 {
		return 0
	}
	v := int(r.b[0]) % n
	r.b = r.b[1:]
	return v
}

// storyPayment is one payment of a story: the refs its events name, and
// what it paid.
type storyPayment struct {
	Invoice, Payment string
	Amount           Amount
	// Subscription is the provider subscription its events name, "" for
	// none; Order that they name the story's order.
	Subscription string
	Order        bool
	// Session: its events name the order's checkout session (with
	// byPayment; else each event chooses).
	Session bool
}

// info is what an event of p names: its refs, the order's checkout
// session when session, and amount.
func (p storyPayment) info(session bool, amount Amount) PaymentInfo {
	info := PaymentInfo{InvoiceID: p.Invoice, PaymentID: p.Payment, SubscriptionID: p.Subscription, Amount: amount}
	if p.Order {
		info.MerchantOrderID = "m-1"
	}
	if session {
		info.CheckoutSessionID = storySession
	}
	info.AttemptRef = info.Attempt()
	return info
}

// story is a story's events as delivered (their InboxIDs from 1, a
// replay taking its event's), and where the batches end.
type story struct {
	events []storyEvent
	cuts   []bool // cuts[i]: a batch ends after event i
}

// deliver orders told (the events as they occurred) for delivery, at
// random: each is received a minute after the one before it, after the
// last occurred, and numbered (InboxID) in that order. Replays (a
// negative InboxID, their event's) come last, after every delivery.
func deliver(r *storyBytes, told []storyEvent) []storyEvent {
	out := slices.Clone(told)
	for i := len(out) - 1; i > 0; i-- {
		j := r.pick(i + 1)
		out[i], out[j] = out[j], out[i]
	}
	var last time.Time
	for _, se := range told {
		if se.Event.OccurredAt.After(last) {
			last = se.Event.OccurredAt
		}
	}
	// A replay is decided again after its event was.
	var ordered []storyEvent
	seen := map[int64]bool{}
	var later []storyEvent
	for _, se := range out {
		if seen[se.InboxID] || se.InboxID < 0 {
			later = append(later, se)
			continue
		}
		seen[se.InboxID] = true
		ordered = append(ordered, se)
	}
	ordered = append(ordered, later...)
	ids := map[int64]int64{}
	for i := range ordered {
		se := &ordered[i]
		se.Received = last.Add(time.Duration(i+1) * time.Minute)
		orig := se.InboxID
		if orig < 0 {
			orig = -orig
		}
		if id, ok := ids[orig]; ok {
			se.InboxID = id
			continue
		}
		ids[orig] = int64(len(ids) + 1)
		se.InboxID = ids[orig]
	}
	return ordered
}

// split chooses where the batches of n events end, at random.
func split(r *storyBytes, n int) []bool {
	cuts := make([]bool, n)
	for i := range cuts {
		cuts[i] = r.pick(3) == 0
	}
	return cuts
}

// storyRun is a story told to a store.
type storyRun struct {
	s *store
	// last is each stored event's last decision (and the subscription
	// rules' when they decided it too), by InboxID.
	last map[int64]string
	// lateMatched is set when events decided unmatched were decided
	// again.
	lateMatched bool
}

// tellStory decides the story's events in batches that end where cuts say (a
// batch ends after every event cuts does not cover), each against the store
// as the batches before it left it, and applies their effects; events
// decided unmatched are decided again in a batch of their own after a
// batch created what they wait for, as storage queues them again.
func tellStory(t *testing.T, setup func(*store), events []storyEvent, cuts []bool, plans Plans) storyRun {
	t.Helper()
	run := storyRun{s: newStore(), last: map[int64]string{}}
	setup(run.s)
	var batch []storyEvent
	decide := func(batch []storyEvent) {
		run.s.triggered = false
		steps, err := run.s.process(batch, plans)
		if err != nil {
			t.Fatalf("deciding a batch of %d events: %v", len(batch), err)
		}
		for i, st := range steps {
			run.last[batch[i].InboxID] = summary(st)
			checkStep(t, batch[i], st)
		}
	}
	for i, se := range events {
		batch = append(batch, se)
		if i < len(cuts) && !cuts[i] && i < len(events)-1 {
			continue
		}
		decide(batch)
		batch = nil
		for round := 0; round < 3 && run.s.triggered; round++ {
			late := run.s.lateMatches(events[:i+1])
			if len(late) == 0 {
				break
			}
			run.lateMatched = true
			decide(late)
		}
	}
	return run
}

// checkStep holds of every step: what it grants, a confirmed payment of
// what the order expects granted it.
func checkStep(t *testing.T, se storyEvent, st Step) {
	t.Helper()
	ev := se.Event
	testOnLive := ev.TestMode && ev.Environment == EnvLive
	for _, e := range st.Outcome.Effects {
		switch e.(type) {
		case GrantLicenses, CreditBalances:
			if ev.Kind != EventPaymentConfirmed || testOnLive || st.Order == nil || !covers(st.Order.PaidOrder, ev.Payment.Amount) {
				t.Errorf("event %s (%s, test %v, %s) grants %T: %s", ev.EventID, ev.Kind, ev.TestMode, ev.Payment.Amount, e, st.Outcome.Reason)
			}
		}
	}
	if sub := st.Subscription; sub != nil {
		for _, e := range sub.Outcome.Effects {
			if _, ok := e.(GrantPeriod); ok && (ev.Kind != EventPaymentConfirmed || testOnLive) {
				t.Errorf("event %s (%s, test %v) pays a period: %s", ev.EventID, ev.Kind, ev.TestMode, sub.Outcome.Reason)
			}
		}
	}
}

// covers reports whether a payment of amount pays what o expects: its
// total in its currency, or its settlement in tokens less the tolerance
// (none when the tolerance is the whole amount).
func covers(o PaidOrder, amount Amount) bool {
	u := amount.Unit
	switch {
	case !amount.Value.IsPositive():
		return false
	case u.IsCurrency():
		return u.Currency == o.Total.Currency && amount.Value.GreaterThanOrEqual(decimal.NewFromInt(o.Total.MinorUnits))
	case o.Settlement == nil || u != TokenUnit(o.Settlement.Token, o.Settlement.Network):
		return false
	case o.Settlement.Tolerance.GreaterThanOrEqual(o.Settlement.Amount):
		return amount.Value.GreaterThanOrEqual(o.Settlement.Amount)
	}
	return amount.Value.GreaterThanOrEqual(o.Settlement.Amount.Sub(o.Settlement.Tolerance))
}

// checkStory checks a story: told in one batch, one event per batch and
// in the batches it chose, it ends alike, within the bounds, and nothing
// decided again after it writes anything.
func checkStory(t *testing.T, setup func(*store), st story, plans Plans) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("the story, as delivered:\n%s", describeStory(st))
		}
	}()
	one := tellStory(t, setup, st.events, slices.Repeat([]bool{false}, len(st.events)), plans)
	each := tellStory(t, setup, st.events, nil, plans)
	some := tellStory(t, setup, st.events, st.cuts, plans)
	for _, r := range []struct {
		name string
		run  storyRun
	}{{"in one batch", one}, {"one event per batch", each}, {"in the batches chosen", some}} {
		if len(r.run.s.problems) > 0 {
			t.Errorf("told %s, storage would refuse or lose writes:\n%s", r.name, strings.Join(r.run.s.problems, "\n"))
		}
		checkBounds(t, r.name, r.run.s)
		if r.name == "one event per batch" {
			continue
		}
		late := each.lateMatched || r.run.lateMatched
		a, b := each.s.money, r.run.s.money
		if late {
			// Events decided again once their subscription exists (or a
			// period paid by their payment) are decided after the batch
			// that created it: after the events that batch held, and
			// before those after it (docs/subscriptions.md, "Events that
			// come before their subscription", "Refunds that come before
			// their charge"). The subscription then lives its events in
			// the order they were applied, as the rules say of events
			// delivered in another order: a charge that occurred after a
			// cancellation keeps the period it paid when applied first
			// (an extra_payment item either way); a full refund cuts
			// access when its period is the latest paid so far; a renewal
			// makes a past_due subscription active; which announcement of
			// a payment pays, and which period number it gets, follow.
			// What must be the same: the order's money, items and events,
			// and — unless a charge came after a cancellation — which
			// payments paid a period and which were refunded.
			pa, pb := a.unnumbered().Periods, b.unnumbered().Periods
			a, b = a.ofOrders(), b.ofOrders()
			if !chargeAfterCancellation(st.events) {
				a.Periods, b.Periods = pa, pb
			}
		}
		if d := a.diff(b); len(d) > 0 {
			t.Errorf("one event per batch, then %s, writes differ:\n%s", r.name, strings.Join(d, "\n"))
		}
		if late {
			// (Nor each event's decision, for the same reason: which of
			// two announcements of a payment applies, and which is
			// already_applied — or a replay of it.)
			continue
		}
		for _, se := range st.events {
			if a, b := each.last[se.InboxID], r.run.last[se.InboxID]; a != b {
				t.Errorf("event %d (%s) decided %q one event per batch, %q %s", se.InboxID, se.Event.EventID, a, b, r.name)
			}
		}
	}
	// Every event decided again, one by one: a replay of each.
	replayed := map[int64]bool{}
	before := some.s.money.clone()
	for _, se := range st.events {
		if replayed[se.InboxID] {
			continue
		}
		replayed[se.InboxID] = true
		if _, err := some.s.process([]storyEvent{se}, plans); err != nil {
			t.Fatalf("replaying event %d: %v", se.InboxID, err)
		}
	}
	// Items aside: a replay is decided against the order as it is now,
	// and may ask a person to look where the first decision did not (a
	// refund decided before the order was paid, refunded_before_payment,
	// is an unidentified_refund of the paid order when it names no payment
	// id: docs/providers.md, the order rules table). It moves no money.
	// And a subscription's state: an overdue notice is stale only when
	// older than the newest event applied, and a renewal applies whatever
	// its date, so a notice delivered before an older renewal, replayed
	// after it, makes the subscription past_due again, for the period now
	// paid (docs/subscriptions.md: "subscription.past_due (once per
	// period)"). Access is the same either way: until the period's end
	// and the grace.
	after := some.s.money.clone()
	after.Items = before.Items
	before, after = before.overdueAside(), after.overdueAside()
	if d := before.diff(after); len(d) > 0 {
		t.Errorf("replaying every event after the story writes:\n%s", strings.Join(d, "\n"))
	}
	if len(some.s.problems) > 0 {
		t.Errorf("replaying every event, storage would refuse or lose writes:\n%s", strings.Join(some.s.problems, "\n"))
	}
}

// chargeAfterCancellation reports whether a payment naming a subscription
// occurred at or after one of its cancellations (neither a provider's
// test event on a live endpoint).
func chargeAfterCancellation(events []storyEvent) bool {
	for _, c := range events {
		for _, p := range events {
			if c.Event.Kind == EventSubscriptionCancelled && ForSubscription(c.Event) && p.Event.Kind == EventPaymentConfirmed &&
				ForSubscription(p.Event) && !p.Event.OccurredAt.Before(c.Event.OccurredAt) {
				return true
			}
		}
	}
	return false
}

// checkBounds holds of what a story wrote: no credit taken back beyond
// what was credited, and a refunded order keeps nothing it was granted.
// (A paying payment's refunds stay within what it paid: the store checks
// each as it records it.)
func checkBounds(t *testing.T, name string, s *store) {
	t.Helper()
	for line, credit := range s.money.Credits {
		if left := s.left(line); left < 0 || left > credit {
			t.Errorf("told %s: line %s credited %d, %d left", name, line, credit, left)
		}
	}
	for id, o := range s.orders {
		if o.State == StateRefunded {
			for _, l := range o.BalanceLines {
				line := fmt.Sprintf("%s/%d", id, l.LineNo)
				if _, ok := s.money.Credits[line]; ok && s.left(line) != 0 {
					t.Errorf("told %s: order %s refunded, %d left of the credit of line %s", name, id, s.left(line), line)
				}
			}
			if len(o.LicenseLines) > 0 && s.money.Licenses[fmt.Sprintf("%s/%d", id, o.LicenseLines[0].LineNo)] > 0 && !s.money.Revoked[id] {
				t.Errorf("told %s: order %s refunded, its licenses not revoked", name, id)
			}
		}
	}
}

// describeStory lists a story's events as delivered, one a line, with the
// batches' ends.
func describeStory(st story) string {
	var b strings.Builder
	for i, se := range st.events {
		ev := se.Event
		p := ev.Payment
		fmt.Fprintf(&b, "  #%d %s %s test=%v occurred=%s inv=%q pay=%q order=%q session=%q sub=%q amount=%s",
			se.InboxID, ev.EventID, ev.Kind, ev.TestMode, ev.OccurredAt.Format("01-02T15:04"), p.InvoiceID, p.PaymentID,
			p.MerchantOrderID, p.CheckoutSessionID, p.SubscriptionID, p.Amount)
		if st.cuts[i] {
			b.WriteString(" |")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// storyEventOf is an event of the story's provider, the InboxID standing
// for its place in the story until it is delivered.
func storyEventOf(provider Provider, n int, kind EventKind, at time.Time, p PaymentInfo) storyEvent {
	typ := string(kind)
	if kind == EventOther {
		typ = "something.new"
	}
	return storyEvent{InboxID: int64(n), BatchEvent: BatchEvent{Event: ProviderEvent{Provider: provider,
		EndpointID: "ep", OrgID: batchOrg, Environment: EnvLive, EventID: fmt.Sprintf("e%d", n), Type: typ, Kind: kind,
		OccurredAt: at, Payment: p}}}
}

// tellEvents makes n events of payments, occurring step apart from jan1:
// each of kind, as chosen, about one of the payments; subscription events
// (lifecycle) name sub. A replay repeats an event told before it. With
// byPayment, a payment's events name its payment id whenever it has one,
// and its refunds only when it has one, as today's adapters do (every
// T-Bank notification names its PaymentId; Yolfi announces no refunds):
// each payment names the same checkout session in all its events (a
// T-Bank payment's OrderId); refunds wait for a period paid by their
// payment id, and a period
// recorded under its invoice alone, or a refund naming none, wakes
// nothing (docs/subscriptions.md, "Refunds that come before their
// charge"), so which batch decides such a refund decides whether it
// finds its period.
func tellEvents(r *storyBytes, provider Provider, payments []storyPayment, total int64, sub string, lifecycle, byPayment bool) []storyEvent {
	n := 1 + r.pick(12)
	steps := []time.Duration{time.Hour, time.Minute, 3 * 24 * time.Hour, 20 * 24 * time.Hour, 40 * 24 * time.Hour}
	var told []storyEvent
	at := jan1
	for i := 1; i <= n; i++ {
		at = at.Add(steps[r.pick(len(steps))])
		p := payments[r.pick(len(payments))]
		session := r.pick(4) == 0
		if byPayment {
			session = p.Session
		}
		var se storyEvent
		switch k := r.pick(11); {
		case k <= 1 || k == 7 && !lifecycle:
			se = storyEventOf(provider, i, EventPaymentConfirmed, at, p.info(session, p.Amount))
		case k == 2:
			// The same payment announced again under other refs: its
			// invoice without the payment id, or the other way round.
			q := p
			if q.Invoice != "" && r.pick(2) == 0 && (!byPayment || q.Payment == "") {
				q.Payment = ""
			} else {
				q.Invoice = ""
			}
			if lifecycle && !p.Order && r.pick(2) == 0 {
				// Naming its subscription, or not: a T-Bank status poll's
				// answer names no card binding, the notification does (a
				// T-Bank payment names no merchant order).
				q.Subscription = sub
				if p.Subscription != "" {
					q.Subscription = ""
				}
			}
			se = storyEventOf(provider, i, EventPaymentConfirmed, at, q.info(session, p.Amount))
		case (k == 3 || k == 4) && byPayment && p.Payment == "":
			se = storyEventOf(provider, i, EventOther, at, p.info(session, Amount{}))
		case k == 3:
			se = storyEventOf(provider, i, EventRefunded, at, storyRefund(r, p, session, Amount{}))
		case k == 4 || k == 10:
			amounts := []int64{1, 100, 300, total, total + 200}
			se = storyEventOf(provider, i, EventPartiallyRefunded, at,
				storyRefund(r, p, session, MinorAmount(amounts[r.pick(len(amounts))], "RUB")))
		case k == 5:
			se = storyEventOf(provider, i, EventAttemptCreated, at, p.info(session, Amount{}))
		case k == 6:
			kind := EventAttemptExpired
			if r.pick(2) == 0 {
				kind = EventAttemptCancelled
			}
			se = storyEventOf(provider, i, kind, at, p.info(session, Amount{}))
		case k == 7 && lifecycle:
			kind := EventSubscriptionOverdue
			if r.pick(2) == 0 {
				kind = EventSubscriptionCancelled
			}
			info := PaymentInfo{SubscriptionID: sub}
			if r.pick(3) == 0 {
				info.MerchantOrderID = "m-1"
			}
			se = storyEventOf(provider, i, kind, at, info)
		case k == 8 && len(told) > 0:
			// A replay: the event decided again (a person's replay).
			se = told[r.pick(len(told))]
			se.InboxID = -max(se.InboxID, -se.InboxID)
			told = append(told, se)
			continue
		default:
			se = storyEventOf(provider, i, EventOther, at, p.info(session, Amount{}))
		}
		se.Event.TestMode = r.pick(10) == 0
		told = append(told, se)
	}
	return told
}

// renameRefunds has some refunds of payments that name an invoice and a
// payment id name one of them alone: a provider may name a payment under
// its invoice in one event and by its id alone in another, and the rules
// match refunds by either. An event and its replays are named alike. It
// reads the input's bytes after all the others a story reads, so an input
// that ends before them (every seed older than it) tells its story as it
// did.
func renameRefunds(r *storyBytes, events []storyEvent) {
	naming := map[int64]int{} // by the stored event (a replay's InboxID is its event's, negated)
	for i := range events {
		p := &events[i].Event.Payment
		if !events[i].Event.Kind.IsRefund() || p.InvoiceID == "" || p.PaymentID == "" {
			continue
		}
		id := max(events[i].InboxID, -events[i].InboxID)
		n, ok := naming[id]
		if !ok {
			n = r.pick(3)
			naming[id] = n
		}
		switch n {
		case 1:
			p.InvoiceID = ""
		case 2:
			p.PaymentID = ""
		}
		p.AttemptRef = p.Attempt()
	}
}

// storyRefund is a refund of p returning amount (none: all of it), naming
// the order and the subscription as p's events do, or not.
func storyRefund(r *storyBytes, p storyPayment, session bool, amount Amount) PaymentInfo {
	q := p
	if r.pick(4) == 0 {
		q.Subscription = ""
	}
	if r.pick(4) == 0 {
		q.Order = false
	}
	return q.info(session, amount)
}

// FuzzOrderStory tells stories of one order: lines of licenses, balance
// credits and maybe an external line, priced in RUB and maybe settled in
// USDT; three payments, each naming an invoice and a payment id, one of
// them or neither, for the total, less, more, in tokens or in another
// currency.
func FuzzOrderStory(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{0, 0, 0, 0, 0, 0, 3, 1, 0, 0, 0, 1, 0, 0, 0, 1, 2, 0, 3, 2},
		{9, 1, 2, 0, 0, 8, 3, 2, 11, 0, 0, 0, 3, 4, 1, 1, 0, 4, 7, 4, 4, 0, 1, 2, 1, 0, 0, 3, 2, 1, 0, 0, 0, 2, 1},
		{6, 17, 4, 1, 3, 5, 6, 8, 9, 1, 1, 0, 4, 1, 2, 3, 2, 1, 0, 1, 3, 1, 2, 4, 0, 4, 2, 2, 1, 0, 7, 1, 1, 1, 2},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		r := &storyBytes{input}
		o := storyOrder(r)
		payments := make([]storyPayment, 3)
		for i := range payments {
			payments[i] = storyPaymentOf(r, i+1, o.PaidOrder)
			payments[i].Order = true
		}
		told := tellEvents(r, ProviderTBank, payments, o.Total.MinorUnits, "", false, false)
		events := deliver(r, told)
		st := story{events: events, cuts: split(r, len(events))}
		renameRefunds(r, st.events)
		checkStory(t, func(s *store) { s.addOrder(o.clone()) }, st, Plans{monthly.ID: monthly})
	})
}

// storyOrder is order o1 (merchant order m-1, checkout session cs-1):
// one or two licenses at 100, a balance credit of 300, maybe another of
// 250 and an external line at 150, maybe settled in 25 USDT on TRON with
// or without a tolerance.
func storyOrder(r *storyBytes) *LockedOrder {
	c := r.pick(32)
	o := batchOrder("o1")
	o.OrgID, o.Environment, o.MerchantOrderID = batchOrg, EnvLive, "m-1"
	o.LicenseLines = []LicenseLine{{LineNo: 0, Quantity: int64(1 + c%2)}}
	o.BalanceLines = []BalanceLine{{LineNo: 1, Account: "acct-1", Amount: Money{"RUB", 300}}}
	if c&2 != 0 {
		o.BalanceLines = append(o.BalanceLines, BalanceLine{LineNo: 2, Account: "acct-2", Amount: Money{"RUB", 250}})
	}
	o.Total.MinorUnits = 100*o.LicenseLines[0].Quantity + 300 + 250*int64(len(o.BalanceLines)-1)
	if c&4 != 0 {
		o.HasExternalLines = true
		o.ExternalLines = []ExternalLine{{LineNo: 3, SKU: "box", Quantity: 1, UnitPrice: Money{"RUB", 150}, Destination: "d1"}}
		o.Total.MinorUnits += 150
	}
	if c&8 != 0 {
		o.Settlement = &Settlement{Token: "USDT", Network: "TRON", Amount: decimal.NewFromInt(25)}
		if c&16 != 0 {
			o.Settlement.Tolerance = decimal.RequireFromString("0.5")
		}
	}
	return o
}

// storyPaymentOf is payment n of an order o: its refs, and what it paid.
func storyPaymentOf(r *storyBytes, n int, o PaidOrder) storyPayment {
	var p storyPayment
	switch r.pick(4) {
	case 0:
		p.Invoice, p.Payment = fmt.Sprintf("inv_%d", n), fmt.Sprintf("pay_%d", n)
	case 1:
		p.Payment = fmt.Sprintf("pay_%d", n)
	case 2:
		p.Invoice = fmt.Sprintf("inv_%d", n)
	}
	total := o.Total.MinorUnits
	usdt := func(v string) Amount { return TokenAmount(decimal.RequireFromString(v), "USDT", "TRON") }
	p.Amount = []Amount{MinorAmount(total, "RUB"), MinorAmount(total-1, "RUB"), MinorAmount(total+200, "RUB"),
		MinorAmount(2*total, "RUB"), usdt("25"), usdt("24.75"), usdt("24"), usdt("26"), MinorAmount(total, "USD")}[r.pick(9)]
	return p
}

// storyYearly is the plan an order's subscription line may name instead
// of monthly: paid for a monthly subscription, a change of plan.
var storyYearly = Plan{ID: "pro-yearly", Period: Period{Months: 12}, Grace: monthly.Grace}

// FuzzSubscriptionStory tells stories of an order of 1000 RUB with a
// subscription line (monthly or yearly, for user_42) or without one, and
// maybe subscription sub_1 registered ahead (monthly, of user_42 or of
// another customer): two payments of the order, naming sub_1 or not, and
// two charges of sub_1 (renewals), naming the order or not; sub_1's
// overdue notices and cancellations; refunds naming the subscription and
// the order, or not. The story runs over months.
func FuzzSubscriptionStory(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		{0, 0, 0, 0, 1, 0, 2, 0, 4, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 1, 0},
		{4, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 5, 2, 1, 0, 0, 0, 0, 3, 3, 0, 3, 0, 0, 0, 0, 0, 3, 3, 0, 7, 0, 1, 0, 4, 0, 0},
		{5, 1, 0, 1, 2, 0, 1, 0, 0, 1, 0, 8, 3, 0, 0, 0, 0, 0, 2, 2, 0, 0, 3, 3, 2, 0, 3, 0, 0, 0, 0, 2, 1, 0, 4, 0},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		r := &storyBytes{input}
		c := r.pick(16)
		o := batchOrder("o1")
		o.OrgID, o.Environment, o.MerchantOrderID = batchOrg, EnvLive, "m-1"
		o.LicenseLines = []LicenseLine{{LineNo: 0, Quantity: 1}}
		if c&1 == 0 {
			o.HasSubscriptionLines, o.SubscriptionPlan, o.SubscriptionFor = true, monthly.ID, "user_42"
			if c&2 != 0 {
				o.SubscriptionPlan = storyYearly.ID
			}
		}
		var registered *SubscriptionRecord
		if c&4 != 0 {
			registered = &SubscriptionRecord{ID: "sub:sub_1", SubscriptionRef: SubscriptionRef{OrgID: batchOrg,
				Environment: EnvLive, Provider: ProviderYolfi, ProviderSubscriptionID: "sub_1", CustomerRef: "user_42",
				PlanID: monthly.ID}, Subscription: Subscription{State: SubActive}}
			if c&8 != 0 {
				registered.CustomerRef = "user_7"
			}
		}
		payments := make([]storyPayment, 4)
		for i := range payments {
			p := storyPaymentOf(r, i+1, o.PaidOrder)
			p.Amount = []Amount{MinorAmount(1000, "RUB"), MinorAmount(999, "RUB"), MinorAmount(2000, "RUB")}[r.pick(3)]
			if i < 2 {
				p.Order = true
				if r.pick(2) == 0 {
					p.Subscription = "sub_1"
				}
			} else {
				p.Subscription, p.Order = "sub_1", r.pick(3) == 0
				p.Invoice, p.Payment = strings.Replace(p.Invoice, "_", "_r", 1), strings.Replace(p.Payment, "_", "_r", 1)
			}
			p.Session = r.pick(4) == 0
			payments[i] = p
		}
		told := tellEvents(r, ProviderYolfi, payments, o.Total.MinorUnits, "sub_1", true, true)
		events := deliver(r, told)
		st := story{events: events, cuts: split(r, len(events))}
		setup := func(s *store) {
			s.addOrder(o.clone())
			if registered != nil {
				rec := *registered
				s.addSubscription(&rec)
			}
		}
		checkStory(t, setup, st, Plans{monthly.ID: monthly, storyYearly.ID: storyYearly})
	})
}
