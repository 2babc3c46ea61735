package fulfillment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Subscriptions: access that follows a subscription's lifecycle, one period
// per paid renewal. These are the rules alone, pure like Decide; storing
// subscriptions, mapping provider events onto them and the sweeper that
// ends access come on top of them.

// SubscriptionState is where a subscription is.
type SubscriptionState string

// Subscription states.
const (
	// SubActive: paid up; access until the current period ends (and the
	// plan's grace after it while the renewal is awaited).
	SubActive SubscriptionState = "active"
	// SubPastDue: the provider said a renewal is overdue; access until the
	// grace after the current period runs out.
	SubPastDue SubscriptionState = "past_due"
	// SubCancelled: cancelled; access until the end of the paid period,
	// never less.
	SubCancelled SubscriptionState = "cancelled"
	// SubExpired: access ended (the sweeper's doing); a renewal paid now
	// starts a new period from its payment.
	SubExpired SubscriptionState = "expired"
)

// Period is how long one paid period lasts: calendar months and days, so
// that a monthly plan renews on the same day of the month.
type Period struct{ Months, Days int }

// After is the end of a period starting at t.
func (p Period) After(t time.Time) time.Time { return p.afterOn(t, t.Day()) }

// afterOn is the end of a period starting at t, in a run of periods that
// began on day of the month: its months later on that day, or on the last
// day of that month when it has fewer days, at t's time; then its days
// later. A monthly run from January 31st ends on February 28th (29th), March
// 31st, April 30th: never on March 3rd, where adding a month to January 31st
// lands (time.AddDate normalizes February 31st), nor, after February, on
// the 28th of each month.
//
// day is t's own day unless t is that day, or the last day of a month
// shorter than it; a plan with days as well as months counts from t.
func (p Period) afterOn(t time.Time, day int) time.Time {
	if p.Months == 0 {
		return t.AddDate(0, 0, p.Days)
	}
	if p.Days != 0 || (day != t.Day() && (day < t.Day() || !lastOfMonth(t))) {
		day = t.Day()
	}
	y, m, _ := t.Date()
	first := time.Date(y, m+time.Month(p.Months), 1, t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), t.Location())
	last := first.AddDate(0, 1, -1).Day()
	return first.AddDate(0, 0, min(day, last)-1+p.Days)
}

// lastOfMonth says whether t is on the last day of its month.
func lastOfMonth(t time.Time) bool { return t.AddDate(0, 0, 1).Day() == 1 }

// Plan is what a subscription is sold as.
type Plan struct {
	ID     string
	Period Period
	// Grace is how long access outlives the end of a period whose renewal
	// has not been paid.
	Grace time.Duration
}

// Subscription is what the rules know of one subscription.
type Subscription struct {
	State SubscriptionState
	// Periods counts the paid periods; the current one is
	// [PeriodStart, PeriodEnd). Zero: none paid yet.
	Periods                int
	PeriodStart, PeriodEnd time.Time
	// Renewals maps each payment that paid a period — its invoice, else
	// its payment id (PeriodKey) — to that period's number and payment id.
	Renewals map[string]Renewal
	// LastEventAt is when the newest event applied to it occurred: a
	// lifecycle event older than that is stale.
	LastEventAt time.Time
	// AccessEnded is set once, by the sweeper or a refund.
	AccessEnded bool
	// CancelledAt is when the cancellation applied to it occurred: kept
	// when its access ends, so that a charge after it is still an extra
	// payment; cleared when the customer buys it again. Zero: never
	// cancelled (or cancelled before the service kept the time).
	CancelledAt time.Time
	// LastPeriodRefunded: the payment of the latest paid period was
	// refunded in full (RefundPeriod), which cut its access.
	LastPeriodRefunded bool
}

// Renewal is one paid period: its number, the payment that paid it, when
// it runs, and whether that payment was refunded in full.
type Renewal struct {
	Period     int
	PaymentID  string
	Start, End time.Time
	Refunded   bool
	// PaidAt is when the payment occurred (zero: not known, a period
	// paid before the service kept it); Purchase, that it was the
	// payment of an order for the plan rather than a charge.
	PaidAt   time.Time
	Purchase bool
}

// SubscriptionEventKind is what an event means to a subscription.
type SubscriptionEventKind string

// Subscription event kinds.
const (
	// SubRenewalPaid: a payment of the subscription was confirmed.
	SubRenewalPaid SubscriptionEventKind = "renewal_paid"
	// SubOverdue: the provider says a renewal is overdue.
	SubOverdue SubscriptionEventKind = "overdue"
	// SubCancelledEvent: the provider says the subscription was cancelled.
	SubCancelledEvent SubscriptionEventKind = "cancelled"
	// SubRefunded: a payment of the subscription was refunded in full.
	SubRefunded SubscriptionEventKind = "refunded"
	// SubPartiallyRefunded: part of a payment of the subscription was
	// refunded.
	SubPartiallyRefunded SubscriptionEventKind = "partially_refunded"
)

// SubscriptionEvent is a provider event as the subscription rules read it.
type SubscriptionEvent struct {
	Kind       SubscriptionEventKind
	OccurredAt time.Time
	// InvoiceID and PaymentID name a renewal's payment: the invoice is the
	// period's bill (two payments of one invoice pay one period), the
	// payment id tells payments apart.
	InvoiceID, PaymentID string
	// Purchase marks the payment of an order the customer placed for the
	// plan (its subscription line), as opposed to a charge the provider
	// made on its own: a purchase renews a cancelled subscription too.
	Purchase bool
}

// SubscriptionEventOf is what ev means to the subscription it names: a
// confirmed payment is a renewal, the provider's subscription events are
// lifecycle events, and any other kind concerns no subscription (decided
// as ignored). received stands in for an occurrence time the provider did
// not send.
func SubscriptionEventOf(ev ProviderEvent, received time.Time) SubscriptionEvent {
	sev := SubscriptionEvent{OccurredAt: ev.OccurredAt, InvoiceID: ev.Payment.InvoiceID, PaymentID: ev.Payment.PaymentID}
	if sev.OccurredAt.IsZero() {
		sev.OccurredAt = received
	}
	switch ev.Kind {
	case EventPaymentConfirmed:
		sev.Kind = SubRenewalPaid
	case EventSubscriptionOverdue:
		sev.Kind = SubOverdue
	case EventSubscriptionCancelled:
		sev.Kind = SubCancelledEvent
	case EventRefunded:
		sev.Kind = SubRefunded
	case EventPartiallyRefunded:
		sev.Kind = SubPartiallyRefunded
	default:
		sev.Kind = SubscriptionEventKind(ev.Kind)
	}
	return sev
}

// ForSubscription reports whether ev is decided by the subscription rules
// rather than the order rules, when no order matches it: it names a
// subscription and is no provider test event on a live endpoint (which the
// order rules ignore).
func ForSubscription(ev ProviderEvent) bool {
	return ev.Payment.SubscriptionID != "" && (!ev.TestMode || ev.Environment != EnvLive)
}

// OrderSubscriptionRef names the subscription that the subscription line
// of an order (plan planID, customer customerRef) pays a period of when ev
// pays the order: the subscription ev names at its provider, else the
// customer's subscription to the plan at that provider, under an id the
// service gives it (CustomerSubscriptionID).
func OrderSubscriptionRef(ev ProviderEvent, planID, customerRef string) SubscriptionRef {
	id := ev.Payment.SubscriptionID
	if id == "" {
		id = CustomerSubscriptionID(planID, customerRef)
	}
	return SubscriptionRef{OrgID: ev.OrgID, Environment: ev.Environment, Provider: ev.Provider,
		ProviderSubscriptionID: id, CustomerRef: customerRef, PlanID: planID}
}

// CustomerSubscriptionID is the id the service gives the subscription of
// a customer to a plan that no provider named: "customer:<plan>:" and a
// digest of the customer's reference, which may be personal data and
// so is kept out of ids (ids are quoted in logs and messages).
func CustomerSubscriptionID(planID, customerRef string) string {
	sum := sha256.Sum256([]byte(customerRef))
	return "customer:" + planID + ":" + hex.EncodeToString(sum[:16])
}

// PeriodKey names the period a renewal pays: its invoice, else its
// payment (a recurrent charge is its own bill).
func (e SubscriptionEvent) PeriodKey() string {
	if e.InvoiceID != "" {
		return "invoice:" + e.InvoiceID
	}
	if e.PaymentID != "" {
		return "payment:" + e.PaymentID
	}
	return ""
}

// Subscription decisions, besides the shared ones (DecisionAlreadyApplied,
// DecisionDuplicatePayment, DecisionStaleIgnored).
const (
	// DecisionRenewed: a renewal paid the next period.
	DecisionRenewed Decision = "renewed"
	// DecisionPastDue: the subscription is past due; access lasts the grace.
	DecisionPastDue Decision = "past_due"
	// DecisionSubscriptionCancelled: cancelled; access until the paid
	// period ends.
	DecisionSubscriptionCancelled Decision = "subscription_cancelled"
	// DecisionAccessEnded: the sweeper ended a subscription's access.
	DecisionAccessEnded Decision = "access_ended"
	// DecisionSubscriptionRefunded: the payment of a paid period was
	// refunded in full: that period grants access until the refund when it
	// had begun (access ends then, once), none of it when it had not.
	DecisionSubscriptionRefunded Decision = "subscription_refunded"
)

// GrantPeriod grants paid period number Period, [Start, End), to the
// subscription, paid by the event's payment: one entitlement per
// (subscription, period), ever.
type GrantPeriod struct {
	Period     int
	Start, End time.Time
}

// RefundPeriod records, once, that the payment of paid period Period was
// refunded in full: the period grants access until Until at most — the
// refund, or the period's start when it had not begun (none of it).
type RefundPeriod struct {
	Period int
	Until  time.Time
}

// MoveSubscription moves the subscription to state To.
type MoveSubscription struct{ To SubscriptionState }

// RecordCancellation keeps At as when the subscription was cancelled, when
// that is earlier than the cancellation kept (or none is): its state does
// not change.
type RecordCancellation struct{ At time.Time }

// OpenChargeItem opens a reconciliation item of Kind about a payment of
// the subscription other than the event's own: one per kind and payment,
// as OpenItem for the event's payment.
type OpenChargeItem struct {
	Kind      ReconKind
	PaymentID string
}

// EndAccess records that the subscription's access ended, once.
type EndAccess struct{}

// BindSubscription gives the subscription the id its provider names it
// by (SubscriptionRef.ProviderSubscriptionID), in place of the one the
// service gave it: see DecideBatch.
type BindSubscription struct{ ProviderSubscriptionID string }

func (GrantPeriod) effect()        {}
func (MoveSubscription) effect()   {}
func (RecordCancellation) effect() {}
func (OpenChargeItem) effect()     {}
func (EndAccess) effect()          {}
func (RefundPeriod) effect()       {}
func (BindSubscription) effect()   {}

// Subscription topics, for outbox subscribers and the event feed.
const (
	TopicSubscriptionRenewed     Topic = "subscription.renewed"
	TopicSubscriptionPastDue     Topic = "subscription.past_due"
	TopicSubscriptionAccessEnded Topic = "subscription.access_ended"
)

// DecideSubscription decides what ev does to sub, a subscription of plan.
// A renewal pays one period per bill however often it is announced, and
// another payment of a bill already paid is an extra payment; lifecycle
// events older than the newest one applied never undo a newer state;
// cancelling never takes away what was paid for.
func DecideSubscription(ev SubscriptionEvent, sub Subscription, plan Plan) Outcome {
	switch ev.Kind {
	case SubRenewalPaid:
		return decideRenewal(ev, sub, plan)
	case SubRefunded, SubPartiallyRefunded:
		return decideSubscriptionRefund(ev, sub)
	case SubCancelledEvent:
		return decideCancellation(ev, sub)
	case SubOverdue:
		if ev.OccurredAt.Before(sub.LastEventAt) {
			return outcome(DecisionStaleIgnored, fmt.Sprintf("occurred at %s, before the newest event applied (%s)",
				ev.OccurredAt.UTC().Format(time.RFC3339), sub.LastEventAt.UTC().Format(time.RFC3339)))
		}
		if sub.State == SubExpired || sub.State == SubCancelled {
			return outcome(DecisionStaleIgnored, "the subscription is "+string(sub.State)+": it is not moved back")
		}
		if sub.State == SubPastDue {
			return outcome(DecisionAlreadyApplied, "the subscription is already past due")
		}
		return outcome(DecisionPastDue, fmt.Sprintf("a renewal is overdue: access until %s (the grace after the paid period)",
			sub.PeriodEnd.Add(plan.Grace).UTC().Format(time.RFC3339)),
			MoveSubscription{SubPastDue}, Publish{TopicSubscriptionPastDue})
	}
	return outcome(DecisionIgnoredType, fmt.Sprintf(
		"%q does not change a subscription: its state follows renewal payments and the provider's subscription events", ev.Kind))
}

func decideRenewal(ev SubscriptionEvent, sub Subscription, plan Plan) Outcome {
	key := ev.PeriodKey()
	if key == "" {
		return outcome(DecisionUnidentifiedPayment,
			"the payment names neither invoice nor payment id, so the period it pays cannot be told: check at the provider",
			OpenItem{ReconUnidentifiedPayment})
	}
	if r, paid := sub.Renewals[key]; paid {
		if r.PaymentID == ev.PaymentID || ev.PaymentID == "" || r.PaymentID == "" {
			return outcome(DecisionAlreadyApplied, fmt.Sprintf("this payment already paid period %d", r.Period))
		}
		return outcome(DecisionDuplicatePayment,
			fmt.Sprintf("period %d was already paid by payment %s; this payment needs a refund review", r.Period, r.PaymentID),
			OpenItem{ReconExtraPayment})
	}
	if r, paid := sub.renewalPaidBy(ev.PaymentID); paid {
		// The same payment, announced under another key (without its
		// invoice, or with it): one payment pays one period.
		return outcome(DecisionAlreadyApplied, fmt.Sprintf("this payment already paid period %d", r.Period))
	}
	move := []Effect{MoveSubscription{SubActive}}
	resumed := false
	// A purchase at or after the cancellation buys the plan again (and
	// clears the cancellation); one before it, announced late, is paid
	// for as a charge before it is, and so is the first period's.
	cancelled := sub.cancelledAt()
	if rebought := ev.Purchase && sub.Periods > 0 && !ev.OccurredAt.Before(cancelled); !cancelled.IsZero() && !rebought {
		switch {
		case !ev.Purchase && !ev.OccurredAt.Before(cancelled):
			// Also once the sweeper ended the access: a charge after the
			// cancellation never starts the subscription again.
			return outcome(DecisionDuplicatePayment, "a payment for a cancelled subscription: it needs a refund review",
				OpenItem{ReconExtraPayment})
		case sub.State == SubCancelled:
			// Paid before the cancellation, announced after it: the period
			// is paid for, and the subscription stays cancelled.
			move = nil
		default:
			// The same, once the sweeper ended the cancelled access: the
			// period paid follows the paid one, as it would have before
			// the sweep, and the subscription is cancelled again.
			move, resumed = []Effect{MoveSubscription{SubCancelled}}, true
		}
	}
	// The next period follows the paid one without a gap — a renewal paid
	// late still pays the period it was due for, also when it is announced
	// after the sweeper ended the access it came in time for — unless
	// access had ended when it was paid (or a refund ended it): then it
	// starts with the payment.
	start := sub.PeriodEnd
	accessEnd := sub.PeriodEnd // a cancelled subscription has no grace
	if sub.CancelledAt.IsZero() {
		accessEnd = accessEnd.Add(plan.Grace)
	}
	ended := sub.refundCutAccess() || !ev.OccurredAt.Before(accessEnd)
	if sub.Periods == 0 || sub.State == SubExpired && !resumed && ended {
		start = ev.OccurredAt
	}
	n := sub.Periods + 1
	end := plan.Period.afterOn(start, sub.runDay(start))
	effects := with(with([]Effect{GrantPeriod{Period: n, Start: start, End: end}}, move...), Publish{TopicSubscriptionRenewed})
	return outcome(DecisionRenewed, fmt.Sprintf("period %d paid: access until %s", n, end.UTC().Format(time.RFC3339)), effects...)
}

// decideCancellation decides a cancellation. It ends as it would have,
// had it been applied before the events that occurred after it, whatever
// order they were announced in — except that nothing paid is taken away:
//   - the charges that occurred at or after it (not purchases) that were
//     applied before it renewed the subscription as if it were not
//     cancelled: each gets the extra_payment item it would have had, under
//     its payment, for a refund review, and its period is kept;
//   - an active or past-due subscription is cancelled, access until the
//     periods paid end (an overdue notice after it changes nothing);
//   - one whose access ended, or that a later cancellation cancelled,
//     keeps its state and this cancellation's time, so that a charge after
//     it is an extra payment;
//   - when the customer bought the plan again after it, the purchase
//     stands (it clears a cancellation): only the charges between get
//     their items.
//
// The same cancellation again, or one after the cancellation kept, is
// stale. So is one older than the newest event applied when a period's
// payment time is not known (paid before the service kept it), as before
// it did.
func decideCancellation(ev SubscriptionEvent, sub Subscription) Outcome {
	at := ev.OccurredAt
	when := at.UTC().Format(time.RFC3339)
	if !sub.CancelledAt.IsZero() && !at.Before(sub.CancelledAt) {
		return outcome(DecisionStaleIgnored, fmt.Sprintf("occurred at %s; the subscription was cancelled at %s already",
			when, sub.CancelledAt.UTC().Format(time.RFC3339)))
	}
	charges, boughtAt, unknown := sub.chargesFrom(at)
	switch {
	case unknown && at.Before(sub.LastEventAt):
		return outcome(DecisionStaleIgnored, fmt.Sprintf("occurred at %s, before the newest event applied (%s)",
			when, sub.LastEventAt.UTC().Format(time.RFC3339)))
	case !boughtAt.IsZero() && len(charges) == 0:
		return outcome(DecisionStaleIgnored, fmt.Sprintf("occurred at %s, before the plan was bought again at %s",
			when, boughtAt.UTC().Format(time.RFC3339)))
	}
	var (
		effects  []Effect
		reason   string
		decision = DecisionSubscriptionCancelled
	)
	switch {
	case !boughtAt.IsZero():
		decision = DecisionStaleIgnored
		reason = fmt.Sprintf("cancelled at %s, before the plan was bought again at %s: the subscription stays as it is",
			when, boughtAt.UTC().Format(time.RFC3339))
	case sub.State == SubExpired || sub.State == SubCancelled:
		effects = append(effects, RecordCancellation{At: at})
		reason = fmt.Sprintf("cancelled at %s, when the subscription was %s already: it stays so, and its "+
			"cancellation is kept from then on (a charge after it is an extra payment)", when, sub.State)
	default:
		effects = append(effects, MoveSubscription{SubCancelled})
		reason = fmt.Sprintf("cancelled at %s: access until the paid period ends at %s", when, sub.PeriodEnd.UTC().Format(time.RFC3339))
	}
	if len(charges) > 0 {
		paid := make([]string, len(charges))
		for i, r := range charges {
			paid[i] = fmt.Sprintf("period %d by payment %s", r.Period, r.PaymentID)
			effects = append(effects, OpenChargeItem{Kind: ReconExtraPayment, PaymentID: r.PaymentID})
		}
		reason += fmt.Sprintf("; charged after the cancellation and applied before it was announced: %s, kept; "+
			"each needs a refund review", strings.Join(paid, ", "))
	}
	return outcome(decision, reason, effects...)
}

// chargesFrom are the periods of s paid by a charge (not a purchase) that
// occurred at or after at, and not after the first purchase after at, in
// period order, refunded or not; boughtAt is when that purchase occurred
// (zero: none). The purchase that started the subscription (its first
// period) is no purchase after a cancellation of it, whenever it is dated.
// unknown says that a period was paid before the service kept when its
// payment occurred: it is never among them.
func (s Subscription) chargesFrom(at time.Time) (charges []Renewal, boughtAt time.Time, unknown bool) {
	for _, r := range s.Renewals {
		unknown = unknown || r.PaidAt.IsZero()
		if r.Purchase && r.Period > 1 && !r.PaidAt.IsZero() && !r.PaidAt.Before(at) && (boughtAt.IsZero() || r.PaidAt.Before(boughtAt)) {
			boughtAt = r.PaidAt
		}
	}
	for _, r := range s.Renewals {
		if r.Purchase || r.PaidAt.IsZero() || r.PaidAt.Before(at) || !boughtAt.IsZero() && r.PaidAt.After(boughtAt) {
			continue
		}
		charges = append(charges, r)
	}
	slices.SortFunc(charges, func(a, b Renewal) int { return a.Period - b.Period })
	return charges, boughtAt, unknown
}

// cancelledAt is when s was cancelled: CancelledAt, else, for a
// subscription cancelled before that was kept, the newest event applied
// to it (its cancellation or later); zero when it is not cancelled.
func (s Subscription) cancelledAt() time.Time {
	switch {
	case !s.CancelledAt.IsZero():
		return s.CancelledAt
	case s.State == SubCancelled:
		return s.LastEventAt
	}
	return time.Time{}
}

// runDay is the day of the month the periods of s that a period
// starting at start follows run from: the day the first of them began,
// each after the first starting when the one before it ended. A period
// that starts anew (the first, one after access ended or was cut by a
// refund) starts its own run: start's day.
func (s Subscription) runDay(start time.Time) int {
	byNumber := make(map[int]Renewal, len(s.Renewals))
	for _, r := range s.Renewals {
		byNumber[r.Period] = r
	}
	r, ok := byNumber[s.Periods]
	// Past the periods paid ahead and refunded before they began, to the
	// one start follows.
	for ok && r.Refunded && !r.End.Equal(start) {
		r, ok = byNumber[r.Period-1]
	}
	if !ok || !r.End.Equal(start) {
		return start.Day()
	}
	for {
		prev, ok := byNumber[r.Period-1]
		if !ok || !prev.End.Equal(r.Start) {
			return r.Start.Day()
		}
		r = prev
	}
}

// decideSubscriptionRefund decides a refund of a payment of sub. A full
// refund of the payment that paid the latest period in force (the
// periods after it, if any, were refunded too) cuts that period's
// access at the refund (at its start when it had not begun): when it had
// begun, access ends now, once, announced as subscription.access_ended,
// and an item says the refunded access was partly used. A refund of an
// earlier period records it and opens an item (the periods after it were
// paid on their own, so access is not cut). A partial refund keeps access
// and opens an item.
func decideSubscriptionRefund(ev SubscriptionEvent, sub Subscription) Outcome {
	key := ev.PeriodKey()
	if key == "" {
		return outcome(DecisionUnidentifiedRefund,
			"the refund names neither invoice nor payment id, so the period it refunds cannot be told: check at the provider",
			OpenItem{ReconRefundAfterFulfill})
	}
	r, found, billPaid := sub.refundedRenewal(ev)
	switch {
	case !found && (billPaid || ev.PaymentID == ""):
		return outcome(DecisionOtherPaymentRefunded, "the refunded payment paid no period of the subscription: access is unchanged")
	case !found:
		// Refunds come before their payments too: the charge's
		// announcement may be late. Nothing is applied until a period
		// paid by the payment is recorded, which queues the refund again.
		return outcome(DecisionUnmatched, "no period of the subscription is paid by the refunded payment (yet): nothing is "+
			"applied; the refund is decided again when a period paid by it is recorded")
	}
	if r.Refunded {
		return outcome(DecisionAlreadyApplied, fmt.Sprintf("the payment of period %d was refunded already", r.Period))
	}
	at := ev.OccurredAt.UTC().Format(time.RFC3339)
	if ev.Kind == SubPartiallyRefunded {
		return outcome(DecisionPartiallyRefunded,
			fmt.Sprintf("part of the payment of period %d was refunded: access is kept; decide whether to end it", r.Period),
			OpenItem{ReconRefundAfterFulfill})
	}
	begun := !ev.OccurredAt.Before(r.Start)
	until := ev.OccurredAt
	if !begun {
		until = r.Start
	} else if until.After(r.End) {
		until = r.End
	}
	refund := RefundPeriod{Period: r.Period, Until: until}
	switch {
	case !sub.latestInForce(r.Period):
		return outcome(DecisionSubscriptionRefunded,
			fmt.Sprintf("the payment of period %d was refunded at %s; the periods after it were paid on their own, so access "+
				"is not cut: decide what the customer keeps", r.Period, at),
			refund, OpenItem{ReconRefundAfterFulfill})
	case !begun:
		return outcome(DecisionSubscriptionRefunded,
			fmt.Sprintf("the payment of period %d was refunded at %s, before the period began: none of it is granted; "+
				"access runs until the paid period before it ends, %s", r.Period, at, r.Start.UTC().Format(time.RFC3339)),
			refund)
	case sub.AccessEnded || sub.State == SubExpired:
		return outcome(DecisionSubscriptionRefunded,
			fmt.Sprintf("the payment of period %d was refunded at %s, after access had ended: the access refunded was used", r.Period, at),
			refund, OpenItem{ReconRefundAfterFulfill})
	}
	return outcome(DecisionSubscriptionRefunded,
		fmt.Sprintf("the payment of period %d was refunded at %s: access ended then; it had been used since %s",
			r.Period, at, r.Start.UTC().Format(time.RFC3339)),
		refund, EndAccess{}, MoveSubscription{SubExpired}, Publish{TopicSubscriptionAccessEnded}, OpenItem{ReconRefundAfterFulfill})
}

// refundCutAccess says whether a refund ended s's access: its latest
// period in force was refunded, cut at the refund (PeriodEnd), which no
// period still paid ends at. A period paid ahead and refunded before it
// began cut nothing: the one before it ran on to its end and its grace.
func (s Subscription) refundCutAccess() bool {
	if !s.LastPeriodRefunded {
		return false
	}
	for _, r := range s.Renewals {
		if !r.Refunded && r.End.Equal(s.PeriodEnd) {
			return false
		}
	}
	return true
}

// latestInForce says whether paid period of s is the latest one whose
// payment was not refunded: every period after it (paid ahead, and
// refunded before it began) was.
func (s Subscription) latestInForce(period int) bool {
	for _, r := range s.Renewals {
		if r.Period > period && !r.Refunded {
			return false
		}
	}
	return period <= s.Periods
}

// refundedRenewal is the paid period a refund ev takes back: the one its
// bill (PeriodKey) paid, unless another payment of that bill did; else,
// when it names a payment, the one that payment paid (a refund may name
// the payment alone of a period paid under its invoice). billPaid tells
// that ev's bill was paid by another payment.
func (s Subscription) refundedRenewal(ev SubscriptionEvent) (r Renewal, found, billPaid bool) {
	r, billPaid = s.Renewals[ev.PeriodKey()]
	if billPaid && (r.PaymentID == "" || ev.PaymentID == "" || r.PaymentID == ev.PaymentID) {
		return r, true, true
	}
	if paid, ok := s.renewalPaidBy(ev.PaymentID); ok {
		return paid, true, billPaid
	}
	return Renewal{}, false, billPaid
}

// periodPaidBy is the paid period of s that ev's payment paid, as a
// refund of it finds it (refundedRenewal): the one its bill paid, unless
// another payment of that bill did, else the one its payment id paid.
func (s Subscription) periodPaidBy(ev SubscriptionEvent) (Renewal, bool) {
	r, found, _ := s.refundedRenewal(ev)
	return r, found
}

// renewalPaidBy is the period of s that payment paid, when one did.
func (s Subscription) renewalPaidBy(payment string) (Renewal, bool) {
	if payment == "" {
		return Renewal{}, false
	}
	for _, r := range s.Renewals {
		if r.PaymentID == payment {
			return r, true
		}
	}
	return Renewal{}, false
}

// Apply records what out changed, for the next event of the subscription.
// Only an event that changed the subscription (a period, a state) becomes
// the newest applied one: an event that was ignored, or changed nothing,
// never makes a later-delivered lifecycle event stale.
func (s *Subscription) Apply(ev SubscriptionEvent, out Outcome) {
	changed := false
	for _, e := range out.Effects {
		switch e.(type) {
		case GrantPeriod, MoveSubscription, EndAccess, RefundPeriod, RecordCancellation:
			changed = true
		}
	}
	for _, e := range out.Effects {
		switch e := e.(type) {
		case GrantPeriod:
			s.Periods, s.PeriodStart, s.PeriodEnd = e.Period, e.Start, e.End
			if s.Renewals == nil {
				s.Renewals = map[string]Renewal{}
			}
			s.Renewals[ev.PeriodKey()] = Renewal{Period: e.Period, PaymentID: ev.PaymentID, Start: e.Start, End: e.End,
				PaidAt: ev.OccurredAt, Purchase: ev.Purchase}
			s.AccessEnded, s.LastPeriodRefunded = false, false
		case RefundPeriod:
			latest := s.latestInForce(e.Period)
			// The period refunded, under its own key: a refund may name
			// another key of it (refundedRenewal).
			for k, r := range s.Renewals {
				if r.Period == e.Period {
					r.Refunded = true
					s.Renewals[k] = r
				}
			}
			if latest {
				s.PeriodEnd, s.LastPeriodRefunded = e.Until, true
			}
		case MoveSubscription:
			s.State = e.To
			switch {
			case e.To == SubCancelled && s.CancelledAt.IsZero():
				s.CancelledAt = ev.OccurredAt
			case e.To == SubActive && ev.Purchase:
				s.CancelledAt = time.Time{} // bought again
			}
		case RecordCancellation:
			if s.CancelledAt.IsZero() || e.At.Before(s.CancelledAt) {
				s.CancelledAt = e.At
			}
		case EndAccess:
			s.AccessEnded = true
		}
	}
	if changed && ev.OccurredAt.After(s.LastEventAt) {
		s.LastEventAt = ev.OccurredAt
	}
}

// Access is whether a subscription grants access at a time, until when, and
// why, in words.
type Access struct {
	Granted bool
	Until   time.Time
	Why     string
}

// AccessEnds is when the access the subscription grants ends unless an
// event extends it: the end of its paid period, plus the plan's grace
// unless it was cancelled. The sweeper looks at it then. The zero time:
// it grants none (no period paid, or expired).
func (s Subscription) AccessEnds(plan Plan) time.Time {
	if s.Periods == 0 || s.State == SubExpired {
		return time.Time{}
	}
	if s.State == SubCancelled {
		return s.PeriodEnd
	}
	return s.PeriodEnd.Add(plan.Grace)
}

// AccessAt says what sub grants at now: an active subscription until its
// period ends, and for the plan's grace after it while the renewal is
// awaited; a past-due one until that grace runs out; a cancelled one until
// its paid period ends; an expired one nothing.
func (s Subscription) AccessAt(now time.Time, plan Plan) Access {
	if s.Periods == 0 {
		return Access{Why: "no period was paid"}
	}
	if s.State == SubExpired {
		if s.LastPeriodRefunded {
			return Access{Why: fmt.Sprintf("access ended: the payment of period %d was refunded", s.Periods)}
		}
		return Access{Why: "access ended"}
	}
	until, why := s.AccessEnds(plan), "paid period"
	switch {
	case s.State == SubPastDue:
		why = "grace of a past-due subscription"
	case s.State == SubCancelled:
		why = "cancelled; the paid period runs out"
	case !now.Before(s.PeriodEnd):
		why = "grace while the renewal is awaited"
	}
	if s.AccessEnded || !now.Before(until) {
		return Access{Until: until, Why: why + " ended"}
	}
	if s.State == SubActive && now.Before(s.PeriodEnd) {
		// Paid up: the renewal may extend it; until is when it ends if
		// none comes.
		until = s.PeriodEnd
	}
	return Access{Granted: true, Until: until, Why: why}
}

// SweepSubscription ends a subscription's access once the rules grant none
// at now: the sweeper's decision, exactly once per subscription (a
// subscription whose access ended is left alone).
func SweepSubscription(sub Subscription, plan Plan, now time.Time) (Outcome, bool) {
	if sub.AccessEnded || sub.Periods == 0 || sub.AccessAt(now, plan).Granted {
		return Outcome{}, false
	}
	return outcome(DecisionAccessEnded, "access ended: "+sub.AccessAt(now, plan).Why,
		EndAccess{}, MoveSubscription{SubExpired}, Publish{TopicSubscriptionAccessEnded}), true
}

// SubscriptionRef names a subscription at its provider, with what its first
// event creates it with.
type SubscriptionRef struct {
	OrgID                  string
	Environment            Environment
	Provider               Provider
	ProviderSubscriptionID string
	CustomerRef, PlanID    string
}

// SubscriptionRecord is a stored subscription.
type SubscriptionRecord struct {
	ID string
	SubscriptionRef
	Subscription
	AccessEndedAt        *time.Time
	CreatedAt, UpdatedAt time.Time
}

// SubscriptionStore keeps subscriptions.
type SubscriptionStore interface {
	// SubscriptionApply decides ev for the subscription ref names —
	// created by its first event — under the subscription's lock, and
	// applies the outcome in the same transaction. eventRef names ev in
	// the items it opens.
	SubscriptionApply(ctx context.Context, ref SubscriptionRef, ev SubscriptionEvent, eventRef string, plan Plan) (Outcome, SubscriptionRecord, error)
	// SubscriptionSweep ends the access of subscription id at now when the
	// rules say so (SweepSubscription), once: false when they do not, or
	// when another sweeper did.
	SubscriptionSweep(ctx context.Context, id string, plan Plan, now time.Time) (bool, error)
}

// Plans are the configured plans, by id.
type Plans map[string]Plan

// For is the plan of rec, or an error saying its plan is not configured
// (its events and sweeps wait until it is).
func (ps Plans) For(rec *SubscriptionRecord) (Plan, error) {
	p, ok := ps[rec.PlanID]
	if !ok {
		return p, fmt.Errorf("subscription %s is on plan %q, which is not configured: configure the plan again to apply its events",
			rec.ID, rec.PlanID)
	}
	return p, nil
}

// SubscriptionFilter selects subscriptions. Empty fields match everything.
type SubscriptionFilter struct {
	// VisibleOrgs restricts the result to these orgs; nil means every org.
	// It comes from the caller's credentials, never from the request.
	VisibleOrgs []string
	OrgID       string
	Environment Environment
	CustomerRef string
	PlanID      string
	State       SubscriptionState
}

// PaidPeriod is one paid period of a subscription, as stored.
type PaidPeriod struct {
	Period     int
	Start, End time.Time
	// Bill is the period's PeriodKey: the invoice or payment that paid it.
	Bill      string
	PaymentID string
	CreatedAt time.Time
	// RefundedAt is when the payment that paid it was refunded in full
	// (zero: it was not); its access ended then, or never began.
	RefundedAt time.Time
}

// SubscriptionDetail is a subscription with its paid periods, oldest
// first (at most MaxSubscriptionPeriods; Omitted counts the older ones
// left out).
type SubscriptionDetail struct {
	SubscriptionRecord
	Periods []PaidPeriod
	Omitted int
}

// MaxSubscriptionPeriods bounds the periods one GetSubscription returns.
const MaxSubscriptionPeriods = 100

// SubscriptionReader reads subscriptions for the API.
type SubscriptionReader interface {
	// SubscriptionCreate stores a subscription that no period paid yet
	// (the first payment naming it pays one) and reports created = true;
	// when one with the same provider key exists it returns that one and
	// created = false — or an error wrapping ErrConflict when its customer
	// or plan differ.
	SubscriptionCreate(ctx context.Context, ref SubscriptionRef) (rec SubscriptionRecord, created bool, err error)
	// SubscriptionGet returns one subscription with its newest paid
	// periods, or an error wrapping ErrNotFound.
	SubscriptionGet(ctx context.Context, id string) (SubscriptionDetail, error)
	// SubscriptionList returns up to limit subscriptions matching f with
	// ids below beforeID (when set), newest first.
	SubscriptionList(ctx context.Context, f SubscriptionFilter, beforeID string, limit int) ([]SubscriptionRecord, error)
	// SubscriptionsOf returns the subscriptions of a customer to a plan
	// (CheckAccess), newest first, in one indexed read: the newest
	// MaxSubscriptionsChecked, and of the older ones that may still grant
	// (a paid period, access not ended) the MaxSubscriptionsChecked whose
	// period ends last.
	SubscriptionsOf(ctx context.Context, orgID string, env Environment, customerRef, planID string) ([]SubscriptionRecord, error)
}

// MaxSubscriptionsChecked bounds the subscriptions CheckAccess reads: as
// many newest, and as many that may grant.
const MaxSubscriptionsChecked = 20

// CheckAccess says what the subscriptions of one customer to plan grant at
// now: the access of the one that grants the longest, else why none does
// (the newest subscription's reason), and which subscription that is.
func CheckAccess(subs []SubscriptionRecord, plan Plan, now time.Time) (best Access, bestID string) {
	for i, s := range subs {
		a := s.AccessAt(now, plan)
		if i == 0 || (a.Granted && (!best.Granted || a.Until.After(best.Until))) {
			best, bestID = a, s.ID
		}
	}
	if len(subs) == 0 {
		best.Why = "no subscription of this customer to this plan"
	}
	return best, bestID
}

// SweepWork is the storage of the sweeper: one sweep per subscription, a
// leased queue item due when the subscription's access ends unless an
// event extends it first.
type SweepWork interface {
	// SweepProcess ends the access of the claimed sweep's subscription
	// when the rules say so at now (the zero time: the database's clock),
	// exactly once however many sweepers race, and completes the sweep —
	// or moves it to when the access now ends. a lease-lost error
	// (worker.ErrLeaseLost) when owner no longer holds the sweep.
	SweepProcess(ctx context.Context, id int64, owner string, now time.Time) (ended bool, err error)
}
