package fulfillment

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// store is a model of what storage keeps of a story, as simple as it can
// be: the facts a batch's snapshot is built from (what storage reads under
// the batch's locks: storage/inbox_process.go, storage/subscriptions.go)
// and what the effects wrote (storage/effects.go), counted. Its methods
// apply a batch's steps as the effect writer does; a write the database
// would refuse (a unique key, a row not found) is a problem, recorded.
type store struct {
	orders  map[string]*LockedOrder // by id, as their rows and lines hold them (Attempts included)
	refunds map[string][]RecordedRefund
	subs    map[string]*SubscriptionRecord // by id, without Renewals (the periods hold them)
	periods map[string][]periodFact        // by subscription id, in the order recorded
	// inbox is each stored event's latest decision, by inbox id.
	inbox map[int64]Decision
	money ledger
	// triggered is set when a batch created a subscription, gave one a
	// provider's id, or recorded a period paid by a payment: what has
	// storage queue events decided unmatched again (lateMatches).
	triggered bool
	// problems are the writes the database would refuse, and anything
	// else a batch's steps did that storage cannot apply.
	problems []string
}

// periodFact is a subscription_periods row.
type periodFact struct {
	Period     int
	Key        string
	PaymentID  string
	Start, End time.Time
	PaidAt     time.Time
	Purchase   bool
	Refunded   bool
}

// ledger is what the effects wrote that money and messages depend on:
// stories that must end alike compare theirs.
type ledger struct {
	// Licenses are the units granted, by "order/line"; Revoked the orders
	// whose licenses were revoked.
	Licenses map[string]int64
	Revoked  map[string]bool
	// Credits are the balance credits by "order/line", Reversals what was
	// taken back of them, by "order/line/movement/refund".
	Credits   map[string]int64
	Reversals map[string]int64
	// Refunds are the partial refunds recorded, "order attempt amount".
	Refunds map[string]bool
	// Periods are the periods paid, "subscription/period" → bill, payment
	// and whether refunded.
	Periods map[string]string
	// Items are the reconciliation items opened, "kind key".
	Items map[string]bool
	// Events are the order and subscription events written; Messages
	// the outbox messages' idempotency keys (one destination, subscribed
	// to every topic, fulfils the external lines).
	Events   map[string]bool
	Messages map[string]bool
	// States are the orders' and subscriptions' states.
	States map[string]string
}

func newStore() *store {
	return &store{orders: map[string]*LockedOrder{}, refunds: map[string][]RecordedRefund{},
		subs: map[string]*SubscriptionRecord{}, periods: map[string][]periodFact{}, inbox: map[int64]Decision{},
		money: ledger{Licenses: map[string]int64{}, Revoked: map[string]bool{}, Credits: map[string]int64{},
			Reversals: map[string]int64{}, Refunds: map[string]bool{}, Periods: map[string]string{},
			Items: map[string]bool{}, Events: map[string]bool{}, Messages: map[string]bool{}, States: map[string]string{}}}
}

// clone is a deep copy of l.
func (l ledger) clone() ledger {
	return ledger{Licenses: maps.Clone(l.Licenses), Revoked: maps.Clone(l.Revoked), Credits: maps.Clone(l.Credits),
		Reversals: maps.Clone(l.Reversals), Refunds: maps.Clone(l.Refunds), Periods: maps.Clone(l.Periods),
		Items: maps.Clone(l.Items), Events: maps.Clone(l.Events), Messages: maps.Clone(l.Messages), States: maps.Clone(l.States)}
}

// diff lists what differs between l and m, one line per key.
func (l ledger) diff(m ledger) []string {
	var out []string
	cmp := func(name string, a, b map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(a)) {
			if a[k] != b[k] {
				out = append(out, fmt.Sprintf("%s %s: %q then %q", name, k, a[k], b[k]))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(b)) {
			if _, ok := a[k]; !ok {
				out = append(out, fmt.Sprintf("%s %s: %q then %q", name, k, "", b[k]))
			}
		}
	}
	cmp("license", texts(l.Licenses), texts(m.Licenses))
	cmp("revoked", texts(l.Revoked), texts(m.Revoked))
	cmp("credit", texts(l.Credits), texts(m.Credits))
	cmp("reversal", texts(l.Reversals), texts(m.Reversals))
	cmp("refund", texts(l.Refunds), texts(m.Refunds))
	cmp("period", l.Periods, m.Periods)
	cmp("item", texts(l.Items), texts(m.Items))
	cmp("event", texts(l.Events), texts(m.Events))
	cmp("message", texts(l.Messages), texts(m.Messages))
	cmp("state", l.States, m.States)
	return out
}

// unnumbered is l with its periods listed by subscription and payment
// (by bill when the payment is not known), not by number: the same
// payment pays one period, whichever of its announcements (with its
// invoice, or without) comes first.
func (l ledger) unnumbered() ledger {
	c := l.clone()
	c.Periods = map[string]string{}
	for k, v := range l.Periods {
		sub, _, _ := strings.Cut(k, "/")
		bill, rest, _ := strings.Cut(v, " ")
		payment, refunded, _ := strings.Cut(rest, " ")
		if payment == "" {
			payment = bill
		}
		c.Periods[sub+" "+payment] = "paid " + refunded
	}
	return c
}

// overdueAside is l with a past_due subscription taken for an active one,
// and without the past_due events: the two grant the same access (until
// the period's end and the grace), and which one a subscription is after
// an overdue notice and a renewal older than it depends on which was
// applied last (a renewal applies whatever its date; the notice, unless
// older than the newest event applied).
func (l ledger) overdueAside() ledger {
	c := l.clone()
	pastDue := func(k string, _ bool) bool { return strings.Contains(k, string(TopicSubscriptionPastDue)) }
	maps.DeleteFunc(c.Events, pastDue)
	maps.DeleteFunc(c.Messages, pastDue)
	for k, v := range c.States {
		if strings.HasPrefix(k, "subscription") {
			c.States[k] = strings.Replace(v, string(SubPastDue)+" ", string(SubActive)+" ", 1)
		}
	}
	return c
}

// ofOrders is l without its subscriptions' periods, items, events and
// states.
func (l ledger) ofOrders() ledger {
	c := l.clone()
	c.Periods = nil
	ofSubscription := func(k string, _ bool) bool { return strings.HasPrefix(k, "subscription") }
	maps.DeleteFunc(c.Events, ofSubscription)
	maps.DeleteFunc(c.Messages, ofSubscription)
	maps.DeleteFunc(c.Items, func(k string, _ bool) bool { return strings.Contains(k, " subscription|") })
	maps.DeleteFunc(c.States, func(k, _ string) bool { return strings.HasPrefix(k, "subscription") })
	return c
}

func texts[V any](m map[string]V) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

func (s *store) problem(format string, args ...any) {
	s.problems = append(s.problems, fmt.Sprintf(format, args...))
}

// addOrder stores o, as CreateOrder would.
func (s *store) addOrder(o *LockedOrder) {
	s.orders[o.ID] = o
	s.money.States["order "+o.ID] = string(o.State)
}

// addSubscription stores rec, as CreateSubscription would (or the first
// payment that pays it).
func (s *store) addSubscription(rec *SubscriptionRecord) {
	s.subs[rec.ID] = rec
	s.money.States["subscription "+rec.ID] = string(rec.State)
}

// orderKeys are the keys o is found by: its merchant order id and its
// checkout session.
func orderKeysOf(o *LockedOrder, session string) []OrderKey {
	keys := []OrderKey{{o.OrgID, o.Environment, ByMerchantOrderID, o.MerchantOrderID}}
	if session != "" {
		keys = append(keys, OrderKey{o.OrgID, o.Environment, ByCheckoutSessionID, session})
	}
	return keys
}

// storySession is the checkout session of every story's order.
const storySession = "cs-1"

// snapshot is what storage locks for a batch of events: the orders they
// name, under each of their keys, with their attempts and recorded
// refunds; and the subscriptions SubscriptionKeys and RefundedPayments
// name, with their periods.
func (s *store) snapshot(batch []BatchEvent, plans Plans) *Snapshot {
	snap := &Snapshot{Orders: map[OrderKey]*LockedOrder{}, Subscriptions: map[SubscriptionKey]*SubscriptionRecord{},
		Created: map[SubscriptionKey]*SubscriptionRecord{}, Plans: plans}
	evs := make([]ProviderEvent, len(batch))
	for i, be := range batch {
		evs[i] = be.Event
	}
	for _, id := range slices.Sorted(maps.Keys(s.orders)) {
		o := s.orders[id]
		keys := orderKeysOf(o, storySession)
		named := slices.ContainsFunc(evs, func(ev ProviderEvent) bool {
			return slices.ContainsFunc(ev.OrderKeys(), func(k OrderKey) bool { return slices.Contains(keys, k) })
		})
		if !named {
			continue
		}
		c := o.clone()
		c.Attempts = maps.Clone(o.Attempts)
		if c.Attempts == nil {
			c.Attempts = map[AttemptKey]AttemptState{}
		}
		c.PartialRefunds = slices.Clone(s.refunds[id])
		for _, k := range keys {
			snap.Orders[k] = c
		}
	}
	keys, ids := SubscriptionKeys(evs, snap.Orders)
	paid := RefundedPayments(evs, snap.Orders)
	for _, id := range slices.Sorted(maps.Keys(s.subs)) {
		rec := s.subs[id]
		locked := slices.Contains(keys, rec.Key()) || slices.Contains(ids, rec.ID) ||
			slices.ContainsFunc(paid, func(p RefundedPayment) bool {
				return p.OrgID == rec.OrgID && p.Environment == rec.Environment && p.Provider == rec.Provider &&
					slices.ContainsFunc(s.periods[id], func(f periodFact) bool { return f.PaymentID == p.PaymentID })
			})
		if locked {
			snap.Subscriptions[rec.Key()] = s.locked(rec)
		}
	}
	return snap
}

// locked is rec as a lock reads it: its periods as Renewals, and whether
// the latest one was refunded.
func (s *store) locked(rec *SubscriptionRecord) *SubscriptionRecord {
	c := *rec
	c.Renewals = map[string]Renewal{}
	c.LastPeriodRefunded = false
	for _, f := range s.periods[rec.ID] {
		c.Renewals[f.Key] = Renewal{Period: f.Period, PaymentID: f.PaymentID, Start: f.Start, End: f.End,
			Refunded: f.Refunded, PaidAt: f.PaidAt, Purchase: f.Purchase}
		if f.Period == c.Periods {
			c.LastPeriodRefunded = f.Refunded
		}
	}
	return &c
}

// create is createSubscription: the subscription ref names, created
// unless it exists, and locked.
func (s *store) create(ref SubscriptionRef) *SubscriptionRecord {
	for _, rec := range s.subs {
		if rec.Key() == ref.Key() {
			return s.locked(rec)
		}
	}
	rec := &SubscriptionRecord{ID: "sub:" + ref.ProviderSubscriptionID, SubscriptionRef: ref,
		Subscription: Subscription{State: SubActive}}
	s.addSubscription(rec)
	s.triggered = true
	return s.locked(rec)
}

// decideBatch is storage's decideBatch: DecideBatch again after creating
// each subscription it asks for.
func (s *store) decideBatch(snap *Snapshot, batch []BatchEvent) ([]Step, error) {
	for range len(batch) + 1 {
		steps, need, err := DecideBatch(snap, batch)
		if err != nil || need == nil {
			return steps, err
		}
		snap.Created[need.Key()] = s.create(*need)
	}
	return nil, fmt.Errorf("deciding a batch: more subscriptions asked for than the batch has events")
}

// storyEvent is a stored event: its inbox id and what it announced.
type storyEvent struct {
	InboxID int64
	BatchEvent
}

// process decides a batch of stored events against the store and applies
// their steps, which it returns.
func (s *store) process(batch []storyEvent, plans Plans) ([]Step, error) {
	bes := make([]BatchEvent, len(batch))
	for i, se := range batch {
		bes[i] = se.BatchEvent
	}
	snap := s.snapshot(bes, plans)
	steps, err := s.decideBatch(snap, bes)
	if err != nil {
		return nil, err
	}
	s.apply(batch, steps)
	return steps, nil
}

// apply writes steps, the decisions of batch, as applySteps does.
func (s *store) apply(batch []storyEvent, steps []Step) {
	refunded := map[string]bool{} // orders that publish order.refunded in this batch
	var withdrawn []string
	requested := map[string]bool{}
	for i, st := range steps {
		se := batch[i]
		s.inbox[se.InboxID] = st.Outcome.Decision
		if sub := st.Subscription; sub != nil {
			s.subscriptionStep(se, sub)
		}
		if st.Subscription != nil && st.Order == nil {
			continue
		}
		ev, p, m := se.Event, se.Event.Payment, st.Order
		var stored *LockedOrder
		if m != nil {
			stored = s.orders[m.ID]
		}
		for _, effect := range st.Outcome.Effects {
			if m == nil {
				if it, ok := effect.(OpenItem); ok {
					s.item(it.Kind, orderSubject(se, ""))
					continue
				}
				s.problem("event %s: %T, and no order matches it", ev.EventID, effect)
				continue
			}
			switch e := effect.(type) {
			case RecordAttempt:
				k := AttemptKey{ev.Provider, p.AttemptRef}
				_, known := stored.Attempts[k]
				switch {
				case st.NewAttempt && known:
					s.problem("event %s: attempt %s inserted again (a unique key)", ev.EventID, k.Ref)
				case !st.NewAttempt && !known:
					s.problem("event %s: attempt %s updated, and it has no row: its state is lost", ev.EventID, k.Ref)
				}
				if stored.Attempts == nil {
					stored.Attempts = map[AttemptKey]AttemptState{}
				}
				stored.Attempts[k] = st.Attempt
			case RecordFullRefund:
				// Appended to the attempt's refunded_payment_ids, by an
				// update of its row.
				k, pay := AttemptKey{ev.Provider, p.AttemptRef}, PaymentKey{ev.Provider, p.PaymentID}
				switch _, row := stored.Attempts[k]; {
				case !row:
					s.problem("event %s: payment %s recorded refunded on attempt %s, which has no row: it is lost", ev.EventID, p.PaymentID, k.Ref)
				case p.PaymentID == "" || p.PaymentID == p.AttemptRef:
					s.problem("event %s: a full refund recorded by a payment id the attempt %s does not need", ev.EventID, k.Ref)
				case stored.FullyRefunded[pay]:
					s.problem("event %s: payment %s appended to refunded_payment_ids again", ev.EventID, p.PaymentID)
				}
				if stored.FullyRefunded == nil {
					stored.FullyRefunded = map[PaymentKey]bool{}
				}
				stored.FullyRefunded[pay] = true
			case MoveOrder:
				stored.State = e.To
				s.money.States["order "+m.ID] = string(e.To)
			case MarkPaid:
				stored.Paid, stored.PaidBy, stored.PaidByEvent, stored.PaidAmount = true, p.PaidRefs(), PaidEventRef(ev), p.Amount
			case GrantLicenses:
				for _, l := range stored.LicenseLines {
					k := fmt.Sprintf("%s/%d", m.ID, l.LineNo)
					if _, ok := s.money.Licenses[k]; ok {
						s.problem("event %s: licenses of line %s granted again", ev.EventID, k)
						continue
					}
					s.money.Licenses[k] = l.Quantity
				}
			case CreditBalances:
				for _, l := range stored.BalanceLines {
					k := fmt.Sprintf("%s/%d", m.ID, l.LineNo)
					if _, ok := s.money.Credits[k]; ok {
						s.problem("event %s: line %s credited again", ev.EventID, k)
						continue
					}
					s.money.Credits[k] = l.Amount.MinorUnits
				}
			case ReverseCredits:
				for _, l := range stored.BalanceLines {
					line := fmt.Sprintf("%s/%d", m.ID, l.LineNo)
					if left := s.left(line); left > 0 {
						s.reverse(line, "refund_reversal", "", left)
					}
				}
			case ReverseCreditShare:
				for _, l := range stored.BalanceLines {
					line := fmt.Sprintf("%s/%d", m.ID, l.LineNo)
					credit, ok := s.money.Credits[line]
					if !ok || stored.Total.MinorUnits <= 0 {
						continue
					}
					share := min(credit*e.Refunded.MinorUnits/stored.Total.MinorUnits, s.left(line))
					if share > 0 {
						s.reverse(line, "partial_reversal", e.Refund, share)
					}
				}
			case RecordRefund:
				r := e.Refund
				if same, known := stored.PaidBy.SamePayment(p); stored.Paid && same && known && stored.inTotalUnit(r.Amount) {
					// Recorded once the payment paid the order: within
					// what it paid (the total, and any excess).
					sum := stored.minorUnits(r.Amount)
					for _, x := range s.refunds[m.ID] {
						if x.Attempt == r.Attempt || (refundedPayment(x) != "" && refundedPayment(x) == refundedPayment(r)) {
							sum += stored.minorUnits(x.Amount)
						}
					}
					if bound := stored.Total.MinorUnits + stored.excessOf(stored.PaidAmount); sum > bound {
						s.problem("event %s: refunds of %s recorded return %d, and it paid %d", ev.EventID, r.Attempt.Ref, sum, bound)
					}
				}
				if !slices.ContainsFunc(s.refunds[m.ID], func(x RecordedRefund) bool {
					return x.Attempt == r.Attempt && x.Amount.Equal(r.Amount)
				}) {
					s.refunds[m.ID] = append(s.refunds[m.ID], r)
					s.money.Refunds[fmt.Sprintf("%s %s %s", m.ID, r.Attempt.Ref, r.Amount)] = true
				}
			case RevokeLicenses:
				s.money.Revoked[m.ID] = true
			case OpenItem:
				s.item(e.Kind, orderSubject(se, m.ID))
			case RequestDeliveries:
				if requested[m.ID] {
					continue
				}
				requested[m.ID] = true
				for _, l := range stored.ExternalLines {
					k := LineKey(m.ID, l.LineNo)
					if s.money.Messages[k] {
						s.problem("event %s: line %d requested again", ev.EventID, l.LineNo)
					}
					s.money.Messages[k] = true
				}
			case WithdrawDeliveries:
				withdrawn = append(withdrawn, m.ID)
			case Publish:
				k := fmt.Sprintf("order %s %s", m.ID, e.Topic)
				if s.money.Events[k] {
					s.problem("event %s: %s published again (order_events_order_once)", ev.EventID, e.Topic)
				}
				s.money.Events[k] = true
				s.money.Messages[EventKey(m.ID, e.Topic)] = true
				if e.Topic == TopicOrderRefunded {
					refunded[m.ID] = true
				}
			case PaySubscriptions:
				if st.Subscription != nil {
					stored.PaidSubscription = st.Subscription.Record.ID
				}
			case RefundSubscriptions:
			default:
				s.problem("event %s: unknown effect %T", ev.EventID, e)
			}
		}
	}
	for _, id := range withdrawn {
		if !refunded[id] {
			s.problem("order %s: deliveries withdrawn in a batch that publishes no %s", id, TopicOrderRefunded)
		}
	}
}

// left is what is left of the credit of line after what was taken back.
func (s *store) left(line string) int64 {
	left := s.money.Credits[line]
	for k, v := range s.money.Reversals {
		if strings.HasPrefix(k, line+"/") {
			left -= v
		}
	}
	return left
}

// reverse takes back amount of line's credit, once per movement and refund.
func (s *store) reverse(line, movement, refund string, amount int64) {
	k := line + "/" + movement + "/" + refund
	if _, ok := s.money.Reversals[k]; !ok {
		s.money.Reversals[k] = amount
	}
}

// item opens an item of kind about subject, unless one is open by its key.
func (s *store) item(kind ReconKind, subject ItemSubject) {
	s.money.Items[string(kind)+" "+ItemKey(kind, subject)] = true
}

// orderSubject is what storage's orderItem says of event se (order "" for
// none).
func orderSubject(se storyEvent, order string) ItemSubject {
	ev, p := se.Event, se.Event.Payment
	return ItemSubject{Provider: ev.Provider, OrgID: ev.OrgID, Environment: ev.Environment, OrderID: order,
		AttemptRef: p.AttemptRef, PaymentID: p.PaymentID, EventID: ev.EventID, InboxID: se.InboxID, Refund: ItemRefund(ev)}
}

// subscriptionStep writes what the subscription rules made of se, as the
// effect writer's subscriptionStep does.
func (s *store) subscriptionStep(se storyEvent, sub *SubscriptionStep) {
	rec := sub.Record
	for _, effect := range sub.Outcome.Effects {
		switch e := effect.(type) {
		case GrantPeriod:
			f := periodFact{Period: e.Period, Key: sub.Event.PeriodKey(), PaymentID: sub.Event.PaymentID, Start: e.Start,
				End: e.End, PaidAt: sub.Event.OccurredAt, Purchase: sub.Event.Purchase}
			for _, g := range s.periods[rec.ID] {
				if g.Period == f.Period || g.Key == f.Key || (f.PaymentID != "" && g.PaymentID == f.PaymentID) {
					s.problem("event %s: period %d (%s, payment %q) of %s recorded again: period %d (%s, payment %q) has its key",
						se.Event.EventID, f.Period, f.Key, f.PaymentID, rec.ID, g.Period, g.Key, g.PaymentID)
				}
			}
			if !f.End.After(f.Start) || f.Period < 1 {
				s.problem("event %s: period %d of %s runs from %s to %s", se.Event.EventID, f.Period, rec.ID, f.Start, f.End)
			}
			s.periods[rec.ID] = append(s.periods[rec.ID], f)
			s.triggered = s.triggered || f.PaymentID != ""
			s.money.Periods[fmt.Sprintf("%s/%d", rec.ID, f.Period)] = fmt.Sprintf("%s %s", f.Key, f.PaymentID)
		case RefundPeriod:
			for i, f := range s.periods[rec.ID] {
				if f.Period == e.Period {
					s.periods[rec.ID][i].Refunded = true
					s.money.Periods[fmt.Sprintf("%s/%d", rec.ID, f.Period)] = fmt.Sprintf("%s %s refunded", f.Key, f.PaymentID)
				}
			}
		case BindSubscription:
			s.triggered = true
		case MoveSubscription, EndAccess, RecordCancellation:
		case Publish:
			k := fmt.Sprintf("subscription %s %s %d", rec.ID, e.Topic, rec.Periods)
			s.money.Events[k] = true
			s.money.Messages[fmt.Sprintf(SubscriptionEventKeyFormat, rec.ID, e.Topic, strconv.Itoa(rec.Periods))] = true
		case OpenItem:
			s.item(e.Kind, ItemSubject{OrgID: rec.OrgID, Environment: rec.Environment, Provider: rec.Provider,
				SubscriptionID: rec.ID, PaymentID: sub.Event.PaymentID, EventID: se.Event.EventID, InboxID: se.InboxID})
		case OpenChargeItem:
			s.item(e.Kind, ItemSubject{OrgID: rec.OrgID, Environment: rec.Environment, Provider: rec.Provider,
				SubscriptionID: rec.ID, PaymentID: e.PaymentID, EventID: se.Event.EventID, InboxID: se.InboxID})
		default:
			s.problem("event %s: %T is not an effect of the subscription rules", se.Event.EventID, e)
		}
	}
	stored := s.subs[rec.ID]
	if stored == nil {
		s.problem("event %s: subscription %s decided, and it was never created", se.Event.EventID, rec.ID)
		return
	}
	// The row: what the record holds, but its periods (their rows).
	stored.SubscriptionRef, stored.Subscription = rec.SubscriptionRef, rec.Subscription
	stored.Renewals, stored.LastPeriodRefunded = nil, false
	s.money.States["subscription "+rec.ID] = fmt.Sprintf("%s %d periods, ended %v, at %s", rec.State, rec.Periods,
		rec.AccessEnded, rec.ProviderSubscriptionID)
}

// lateMatches are the stored events decided unmatched that storage queues
// again once what they wait for exists: a subscription they name (created,
// or given that id), or a period paid by the payment a refund returns.
func (s *store) lateMatches(events []storyEvent) []storyEvent {
	var out []storyEvent
	seen := map[int64]bool{}
	for _, se := range events {
		if seen[se.InboxID] || s.inbox[se.InboxID] != DecisionUnmatched {
			continue
		}
		seen[se.InboxID] = true
		ev := se.Event
		waits := false
		for _, rec := range s.subs {
			if ev.Payment.SubscriptionID != "" && rec.Key() == ev.SubscriptionKey() {
				waits = true
			}
			if p, ok := ev.WaitsForItsPayment(); ok && p.OrgID == rec.OrgID && p.Environment == rec.Environment &&
				p.Provider == rec.Provider && (ev.Payment.SubscriptionID == "" || ev.Payment.SubscriptionID == rec.ProviderSubscriptionID) &&
				slices.ContainsFunc(s.periods[rec.ID], func(f periodFact) bool { return f.PaymentID == p.PaymentID }) {
				waits = true
			}
		}
		if waits {
			out = append(out, se)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].InboxID < out[j].InboxID })
	return out
}

// refundedPayment is the payment a recorded refund is of, by its id, as
// the stories name payments (pay_N, invoices inv_N): "" when it named an
// invoice alone.
func refundedPayment(r RecordedRefund) string {
	if r.PaymentID != "" {
		return r.PaymentID
	}
	if strings.HasPrefix(r.Attempt.Ref, "pay_") {
		return r.Attempt.Ref
	}
	return ""
}
