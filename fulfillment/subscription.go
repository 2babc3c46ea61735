package fulfillment

import (
	"context"
	"fmt"
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
func (p Period) After(t time.Time) time.Time { return t.AddDate(0, p.Months, p.Days) }

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
	// AccessEnded is set once, by the sweeper.
	AccessEnded bool
}

// Renewal is one paid period: its number and the payment that paid it.
type Renewal struct {
	Period    int
	PaymentID string
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
)

// SubscriptionEvent is a provider event as the subscription rules read it.
type SubscriptionEvent struct {
	Kind       SubscriptionEventKind
	OccurredAt time.Time
	// InvoiceID and PaymentID name a renewal's payment: the invoice is the
	// period's bill (two payments of one invoice pay one period), the
	// payment id tells payments apart.
	InvoiceID, PaymentID string
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
)

// GrantPeriod grants paid period number Period, [Start, End), to the
// subscription, paid by the event's payment: one entitlement per
// (subscription, period), ever.
type GrantPeriod struct {
	Period     int
	Start, End time.Time
}

// MoveSubscription moves the subscription to state To.
type MoveSubscription struct{ To SubscriptionState }

// EndAccess records that the subscription's access ended, once.
type EndAccess struct{}

func (GrantPeriod) effect()      {}
func (MoveSubscription) effect() {}
func (EndAccess) effect()        {}

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
	case SubOverdue, SubCancelledEvent:
		if ev.OccurredAt.Before(sub.LastEventAt) {
			return outcome(DecisionStaleIgnored, fmt.Sprintf("occurred at %s, before the newest event applied (%s)",
				ev.OccurredAt.UTC().Format(time.RFC3339), sub.LastEventAt.UTC().Format(time.RFC3339)))
		}
		if sub.State == SubExpired || sub.State == SubCancelled {
			return outcome(DecisionStaleIgnored, "the subscription is "+string(sub.State)+": it is not moved back")
		}
		if ev.Kind == SubCancelledEvent {
			return outcome(DecisionSubscriptionCancelled,
				"cancelled: access until the paid period ends at "+sub.PeriodEnd.UTC().Format(time.RFC3339),
				MoveSubscription{SubCancelled})
		}
		if sub.State == SubPastDue {
			return outcome(DecisionAlreadyApplied, "the subscription is already past due")
		}
		return outcome(DecisionPastDue, fmt.Sprintf("a renewal is overdue: access until %s (the grace after the paid period)",
			sub.PeriodEnd.Add(plan.Grace).UTC().Format(time.RFC3339)),
			MoveSubscription{SubPastDue}, Publish{TopicSubscriptionPastDue})
	}
	return outcome(DecisionIgnoredType, fmt.Sprintf("%q does not concern subscriptions", ev.Kind))
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
	move := []Effect{MoveSubscription{SubActive}}
	if sub.State == SubCancelled {
		if !ev.OccurredAt.Before(sub.LastEventAt) {
			return outcome(DecisionDuplicatePayment, "a payment for a cancelled subscription: it needs a refund review",
				OpenItem{ReconExtraPayment})
		}
		// Paid before the cancellation, announced after it: the period is
		// paid for, and the subscription stays cancelled.
		move = nil
	}
	// The next period follows the paid one without a gap — a renewal paid
	// late still pays the period it was due for — unless access had ended:
	// then it starts with the payment.
	start := sub.PeriodEnd
	if sub.Periods == 0 || sub.State == SubExpired {
		start = ev.OccurredAt
	}
	n := sub.Periods + 1
	end := plan.Period.After(start)
	effects := with(with([]Effect{GrantPeriod{Period: n, Start: start, End: end}}, move...), Publish{TopicSubscriptionRenewed})
	return outcome(DecisionRenewed, fmt.Sprintf("period %d paid: access until %s", n, end.UTC().Format(time.RFC3339)), effects...)
}

// Apply records what out changed, for the next event of the subscription.
func (s *Subscription) Apply(ev SubscriptionEvent, out Outcome) {
	for _, e := range out.Effects {
		switch e := e.(type) {
		case GrantPeriod:
			s.Periods, s.PeriodStart, s.PeriodEnd = e.Period, e.Start, e.End
			if s.Renewals == nil {
				s.Renewals = map[string]Renewal{}
			}
			s.Renewals[ev.PeriodKey()] = Renewal{Period: e.Period, PaymentID: ev.PaymentID}
			s.AccessEnded = false
		case MoveSubscription:
			s.State = e.To
		case EndAccess:
			s.AccessEnded = true
		}
	}
	if out.Decision != DecisionStaleIgnored && ev.OccurredAt.After(s.LastEventAt) {
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

// AccessAt says what sub grants at now: an active subscription until its
// period ends, and for the plan's grace after it while the renewal is
// awaited; a past-due one until that grace runs out; a cancelled one until
// its paid period ends; an expired one nothing.
func (s Subscription) AccessAt(now time.Time, plan Plan) Access {
	if s.Periods == 0 {
		return Access{Why: "no period was paid"}
	}
	until, why := s.PeriodEnd, "paid period"
	switch s.State {
	case SubActive:
		if !now.Before(s.PeriodEnd) {
			until, why = s.PeriodEnd.Add(plan.Grace), "grace while the renewal is awaited"
		}
	case SubPastDue:
		until, why = s.PeriodEnd.Add(plan.Grace), "grace of a past-due subscription"
	case SubCancelled:
		why = "cancelled; the paid period runs out"
	case SubExpired:
		return Access{Why: "access ended"}
	}
	if s.AccessEnded || !now.Before(until) {
		return Access{Until: until, Why: why + " ended"}
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
