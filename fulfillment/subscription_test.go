package fulfillment

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	monthly = Plan{ID: "pro-monthly", Period: Period{Months: 1}, Grace: 72 * time.Hour}
	jan1    = time.Date(2027, 1, 1, 10, 0, 0, 0, time.UTC)
)

func day(n int) time.Time { return jan1.AddDate(0, 0, n) }

func renewal(at time.Time, invoice, payment string) SubscriptionEvent {
	return SubscriptionEvent{Kind: SubRenewalPaid, OccurredAt: at, InvoiceID: invoice, PaymentID: payment}
}

func lifecycle(kind SubscriptionEventKind, at time.Time) SubscriptionEvent {
	return SubscriptionEvent{Kind: kind, OccurredAt: at}
}

// run decides each event in turn, as storage applies them, and returns the
// decisions and the subscription they leave.
func run(events ...SubscriptionEvent) ([]Decision, Subscription) {
	var (
		sub       Subscription
		decisions []Decision
	)
	for _, ev := range events {
		out := DecideSubscription(ev, sub, monthly)
		sub.Apply(ev, out)
		decisions = append(decisions, out.Decision)
	}
	return decisions, sub
}

// sweptAt is sub once the sweeper ended its access at at.
func sweptAt(t *testing.T, sub Subscription, at time.Time) Subscription {
	t.Helper()
	out, swept := SweepSubscription(sub, monthly, at)
	if !swept {
		t.Fatalf("not swept at %s", at)
	}
	sub.Apply(SubscriptionEvent{OccurredAt: at}, out)
	return sub
}

func decisions(ds ...Decision) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = string(d)
	}
	return strings.Join(s, ",")
}

func TestSubscriptionRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		events    []SubscriptionEvent
		decisions string
		periods   int
		end       time.Time
		state     SubscriptionState
	}{
		{"first payment starts the first period",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1")},
			"renewed", 1, jan1.AddDate(0, 1, 0), SubActive},
		{"a renewal announced three times pays one period",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), renewal(day(30), "inv_2", "pay_2"),
				renewal(day(30), "inv_2", "pay_2"), renewal(day(31), "inv_2", "pay_2")},
			"renewed,renewed,already_applied,already_applied", 2, jan1.AddDate(0, 2, 0), SubActive},
		{"renewals out of order still pay one period each, without a gap",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), renewal(day(59), "inv_3", "pay_3"), renewal(day(30), "inv_2", "pay_2")},
			"renewed,renewed,renewed", 3, jan1.AddDate(0, 3, 0), SubActive},
		{"another payment of a bill already paid is an extra payment",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), renewal(day(1), "inv_1", "pay_9")},
			"renewed,duplicate_payment", 1, jan1.AddDate(0, 1, 0), SubActive},
		{"recurrent charges without invoices: each payment its own period",
			[]SubscriptionEvent{renewal(jan1, "", "9001"), renewal(day(31), "", "9002"), renewal(day(31), "", "9002")},
			"renewed,renewed,already_applied", 2, jan1.AddDate(0, 2, 0), SubActive},
		{"overdue, then the renewal paid: active, extended once from the old end",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubOverdue, day(32)), renewal(day(33), "inv_2", "pay_2")},
			"renewed,past_due,renewed", 2, jan1.AddDate(0, 2, 0), SubActive},
		{"a stale overdue after a newer renewal is ignored",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), renewal(day(31), "inv_2", "pay_2"), lifecycle(SubOverdue, day(30))},
			"renewed,renewed,stale_ignored", 2, jan1.AddDate(0, 2, 0), SubActive},
		{"overdue twice: one move",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubOverdue, day(32)), lifecycle(SubOverdue, day(33))},
			"renewed,past_due,already_applied", 1, jan1.AddDate(0, 1, 0), SubPastDue},
		{"cancelled mid-period keeps the paid period",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubCancelledEvent, day(10))},
			"renewed,subscription_cancelled", 1, jan1.AddDate(0, 1, 0), SubCancelled},
		{"an overdue after the cancellation does not move it back",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubCancelledEvent, day(10)), lifecycle(SubOverdue, day(32))},
			"renewed,subscription_cancelled,stale_ignored", 1, jan1.AddDate(0, 1, 0), SubCancelled},
		{"a renewal paid before the cancellation, announced after it, pays its period",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubCancelledEvent, day(31)), renewal(day(30), "inv_2", "pay_2")},
			"renewed,subscription_cancelled,renewed", 2, jan1.AddDate(0, 2, 0), SubCancelled},
		{"an order bought after the cancellation subscribes again: active, the period follows the paid one",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubCancelledEvent, day(10)),
				{Kind: SubRenewalPaid, OccurredAt: day(12), InvoiceID: "inv_2", PaymentID: "pay_2", Purchase: true}},
			"renewed,subscription_cancelled,renewed", 2, jan1.AddDate(0, 2, 0), SubActive},
		{"an ignored event makes no later lifecycle event stale",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubscriptionEventKind(EventAttemptExpired), day(33)),
				lifecycle(SubOverdue, day(32))},
			"renewed,ignored_type,past_due", 1, jan1.AddDate(0, 1, 0), SubPastDue},
		{"a renewal paid after the cancellation is an extra payment",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubCancelledEvent, day(10)), renewal(day(31), "inv_2", "pay_2")},
			"renewed,subscription_cancelled,duplicate_payment", 1, jan1.AddDate(0, 1, 0), SubCancelled},
		{"a cancellation announced after a charge that occurred after it: cancelled, the period paid kept",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), renewal(day(31), "inv_2", "pay_2"), lifecycle(SubCancelledEvent, day(10))},
			"renewed,renewed,subscription_cancelled", 2, jan1.AddDate(0, 2, 0), SubCancelled},
		{"a cancellation announced after a charge that occurred before it: cancelled",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), renewal(day(30), "inv_2", "pay_2"), lifecycle(SubCancelledEvent, day(31))},
			"renewed,renewed,subscription_cancelled", 2, jan1.AddDate(0, 2, 0), SubCancelled},
		{"a cancellation announced after the plan was bought again after it: stale",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"),
				{Kind: SubRenewalPaid, OccurredAt: day(12), InvoiceID: "inv_2", PaymentID: "pay_2", Purchase: true},
				lifecycle(SubCancelledEvent, day(10))},
			"renewed,renewed,stale_ignored", 2, jan1.AddDate(0, 2, 0), SubActive},
		{"a cancellation announced after an overdue notice that came after it: cancelled",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubOverdue, day(32)), lifecycle(SubCancelledEvent, day(10))},
			"renewed,past_due,subscription_cancelled", 1, jan1.AddDate(0, 1, 0), SubCancelled},
		{"a payment naming no bill cannot pay a period",
			[]SubscriptionEvent{renewal(jan1, "", "")},
			"unidentified_payment", 0, time.Time{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, sub := run(tc.events...)
			if decisions(got...) != tc.decisions || sub.Periods != tc.periods || !sub.PeriodEnd.Equal(tc.end) || sub.State != tc.state {
				t.Errorf("decisions %s, %d periods until %s, %s; want %s, %d until %s, %s",
					decisions(got...), sub.Periods, sub.PeriodEnd, sub.State, tc.decisions, tc.periods, tc.end, tc.state)
			}
		})
	}
}

// Access follows the state: the paid period, the grace while a renewal is
// awaited or overdue, the paid period only once cancelled, nothing once
// ended; the sweeper ends it exactly once.
func TestSubscriptionAccessAndSweep(t *testing.T) {
	t.Parallel()
	periodEnd := jan1.AddDate(0, 1, 0)
	graceEnd := periodEnd.Add(monthly.Grace)
	cases := []struct {
		name    string
		events  []SubscriptionEvent
		at      time.Time
		granted bool
		until   time.Time
	}{
		{"nothing paid", nil, jan1, false, time.Time{}},
		{"within the paid period", []SubscriptionEvent{renewal(jan1, "inv_1", "pay_1")}, day(10), true, periodEnd},
		{"past the period, renewal awaited: grace", []SubscriptionEvent{renewal(jan1, "inv_1", "pay_1")}, periodEnd.Add(time.Hour), true, graceEnd},
		{"past the grace", []SubscriptionEvent{renewal(jan1, "inv_1", "pay_1")}, graceEnd, false, graceEnd},
		{"past due, within the grace",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubOverdue, periodEnd)}, periodEnd.Add(time.Hour), true, graceEnd},
		{"cancelled, within the paid period",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubCancelledEvent, day(10))}, day(20), true, periodEnd},
		{"cancelled: no grace after the paid period",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), lifecycle(SubCancelledEvent, day(10))}, periodEnd, false, periodEnd},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, sub := run(tc.events...)
			a := sub.AccessAt(tc.at, monthly)
			if a.Granted != tc.granted || !a.Until.Equal(tc.until) || a.Why == "" {
				t.Errorf("access at %s = %+v, want granted %v until %s, with a reason", tc.at, a, tc.granted, tc.until)
			}
			out, swept := SweepSubscription(sub, monthly, tc.at)
			if want := sub.Periods > 0 && !tc.granted; swept != want {
				t.Errorf("sweep at %s = %v, want %v", tc.at, swept, want)
			}
			if swept {
				sub.Apply(SubscriptionEvent{OccurredAt: tc.at}, out)
				if _, again := SweepSubscription(sub, monthly, tc.at.Add(time.Hour)); again || sub.State != SubExpired {
					t.Errorf("after the sweep: state %s, swept again %v; want expired, once", sub.State, again)
				}
				if sub.AccessAt(tc.at, monthly).Granted {
					t.Error("an expired subscription grants access")
				}
			}
		})
	}
}

// After access ended, a renewal starts a new period from its payment.
func TestSubscriptionRenewedAfterExpiry(t *testing.T) {
	t.Parallel()
	_, sub := run(renewal(jan1, "inv_1", "pay_1"))
	sub = sweptAt(t, sub, day(60))
	ev := renewal(day(70), "inv_2", "pay_2")
	out := DecideSubscription(ev, sub, monthly)
	sub.Apply(ev, out)
	if out.Decision != DecisionRenewed || !sub.PeriodStart.Equal(day(70)) || sub.State != SubActive || !sub.AccessAt(day(71), monthly).Granted {
		t.Errorf("renewal after expiry: %s, period from %s, %s", out.Decision, sub.PeriodStart, sub.State)
	}
}

// A cancelled subscription stays cancelled once the sweeper ended its
// access: a charge after the cancellation is an extra payment, before the
// sweep and after it; a purchase (the customer buying the plan again)
// starts it again, and a charge after that renews it.
func TestSubscriptionChargeAfterCancelledAccessEnded(t *testing.T) {
	t.Parallel()
	feb1 := jan1.AddDate(0, 1, 0)
	_, sub := run(renewal(jan1, "inv_1", "pay_1"), lifecycle(SubCancelledEvent, day(10)))
	if !sub.CancelledAt.Equal(day(10)) {
		t.Fatalf("cancelled at %s, want day 10", sub.CancelledAt)
	}
	charge := renewal(feb1.Add(time.Second), "inv_2", "pay_2")
	if out := DecideSubscription(charge, sub, monthly); out.Decision != DecisionDuplicatePayment {
		t.Fatalf("before the sweep: %s, want duplicate_payment", out.Decision)
	}
	out, swept := SweepSubscription(sub, monthly, feb1)
	if !swept {
		t.Fatal("not swept at the end of the cancelled period")
	}
	sub.Apply(SubscriptionEvent{OccurredAt: feb1}, out)
	out = DecideSubscription(charge, sub, monthly)
	sub.Apply(charge, out)
	if out.Decision != DecisionDuplicatePayment || out.Item() != ReconExtraPayment || sub.State != SubExpired || sub.Periods != 1 {
		t.Errorf("after the sweep: %s (item %q), %s with %d periods; want duplicate_payment and its item, expired with 1",
			out.Decision, out.Item(), sub.State, sub.Periods)
	}
	buy := renewal(day(40), "inv_3", "pay_3")
	buy.Purchase = true
	out = DecideSubscription(buy, sub, monthly)
	sub.Apply(buy, out)
	if out.Decision != DecisionRenewed || sub.State != SubActive || !sub.CancelledAt.IsZero() {
		t.Errorf("bought again: %s, %s, cancelled at %s; want renewed, active, not cancelled", out.Decision, sub.State, sub.CancelledAt)
	}
	next := renewal(day(75), "inv_4", "pay_4")
	if out := DecideSubscription(next, sub, monthly); out.Decision != DecisionRenewed {
		t.Errorf("a charge after buying again: %s, want renewed", out.Decision)
	}
}

// A charge paid before the cancellation and announced after it pays the
// period after the paid one and leaves the subscription cancelled, whether
// the sweeper ended the cancelled access before it came or not.
func TestSubscriptionChargeBeforeTheCancellationAnnouncedLate(t *testing.T) {
	t.Parallel()
	feb1 := jan1.AddDate(0, 1, 0)
	cancelled := func(sweep bool) Subscription {
		_, sub := run(renewal(jan1, "inv_1", "pay_1"), lifecycle(SubCancelledEvent, day(10)))
		if sweep {
			out, ok := SweepSubscription(sub, monthly, feb1)
			if !ok {
				t.Fatal("not swept at the end of the cancelled period")
			}
			sub.Apply(SubscriptionEvent{OccurredAt: feb1}, out)
		}
		return sub
	}
	charge := renewal(day(5), "inv_2", "pay_2") // before the cancellation
	for name, sub := range map[string]Subscription{"before the sweep": cancelled(false), "after the sweep": cancelled(true)} {
		out := DecideSubscription(charge, sub, monthly)
		sub.Apply(charge, out)
		if out.Decision != DecisionRenewed || sub.State != SubCancelled || sub.Periods != 2 ||
			!sub.PeriodStart.Equal(feb1) || !sub.CancelledAt.Equal(day(10)) {
			t.Errorf("%s: %s, %s with %d periods from %s, cancelled at %s; want renewed, cancelled, 2 periods from Feb 1, cancelled on day 10",
				name, out.Decision, sub.State, sub.Periods, sub.PeriodStart, sub.CancelledAt)
		}
		if a := sub.AccessAt(feb1.AddDate(0, 0, 10), monthly); !a.Granted {
			t.Errorf("%s: no access in the period paid: %+v", name, a)
		}
	}
}

// A cancellation announced after a charge that occurred after it was
// applied: the subscription is cancelled, the period that charge paid is
// kept (access until it ends), an extra_payment item names the charge for
// a refund review, and the cancellation's time is kept: the next charge is
// an extra payment too.
func TestSubscriptionCancellationAnnouncedAfterALaterCharge(t *testing.T) {
	t.Parallel()
	_, sub := run(renewal(jan1, "inv_1", "pay_1"), renewal(day(31), "inv_2", "pay_2"))
	cancel := lifecycle(SubCancelledEvent, day(10))
	out := DecideSubscription(cancel, sub, monthly)
	want := []Effect{MoveSubscription{SubCancelled}, OpenChargeItem{ReconExtraPayment, "pay_2"}}
	if out.Decision != DecisionSubscriptionCancelled || !reflect.DeepEqual(out.Effects, want) ||
		!strings.Contains(out.Reason, "period 2 by payment pay_2") {
		t.Fatalf("decided %s %+v (%s), want subscription_cancelled %+v naming period 2", out.Decision, out.Effects, out.Reason, want)
	}
	sub.Apply(cancel, out)
	if !sub.CancelledAt.Equal(day(10)) || !sub.LastEventAt.Equal(day(31)) {
		t.Errorf("cancelled at %s, newest event %s; want day 10 and day 31", sub.CancelledAt, sub.LastEventAt)
	}
	if a := sub.AccessAt(day(50), monthly); !a.Granted || !a.Until.Equal(jan1.AddDate(0, 2, 0)) {
		t.Errorf("access on day 50 = %+v, want until the paid period ends", a)
	}
	if out := DecideSubscription(renewal(day(59), "inv_3", "pay_3"), sub, monthly); out.Decision != DecisionDuplicatePayment {
		t.Errorf("the next charge: %s, want duplicate_payment", out.Decision)
	}
	// A period paid before the service kept when it was paid tells nothing.
	unknown := sub.Renewals["invoice:inv_2"]
	unknown.PaidAt = time.Time{}
	_, again := run(renewal(jan1, "inv_1", "pay_1"), renewal(day(31), "inv_2", "pay_2"))
	again.Renewals["invoice:inv_2"] = unknown
	if out := DecideSubscription(cancel, again, monthly); out.Decision != DecisionStaleIgnored {
		t.Errorf("with the charge's time unknown: %s, want stale_ignored", out.Decision)
	}
}

// sweepAt stands for the sweeper in a story: it ends the access due at
// its time, if any.
var sweepAt = SubscriptionEventKind("(the sweeper)")

// tell decides a story's events in turn, as storage applies them, and
// returns the subscription it leaves and the extra_payment items it opened,
// one per payment (the item key's rule).
func tell(events ...SubscriptionEvent) (sub Subscription, items map[string]bool) {
	items = map[string]bool{}
	for _, ev := range events {
		var out Outcome
		if ev.Kind == sweepAt {
			var ok bool
			if out, ok = SweepSubscription(sub, monthly, ev.OccurredAt); !ok {
				continue
			}
		} else {
			out = DecideSubscription(ev, sub, monthly)
		}
		for _, e := range out.Effects {
			switch e := e.(type) {
			case OpenItem:
				if e.Kind == ReconExtraPayment {
					items[ev.PaymentID] = true
				}
			case OpenChargeItem:
				items[e.PaymentID] = true
			}
		}
		sub.Apply(ev, out)
	}
	return sub, items
}

// A cancellation announced late ends as it would have, had it come before
// what followed it: the same state, the same cancellation time kept, and
// the same charges (by payment) up for a refund review — the periods those
// charges paid are kept (nothing paid is taken away), so only their count
// may differ.
func TestSubscriptionCancellationInEitherOrder(t *testing.T) {
	t.Parallel()
	purchase := func(at time.Time, invoice, payment string) SubscriptionEvent {
		ev := renewal(at, invoice, payment)
		ev.Purchase = true
		return ev
	}
	feb1 := jan1.AddDate(0, 1, 0)
	cancel := func(at time.Time) SubscriptionEvent { return lifecycle(SubCancelledEvent, at) }
	sweep := lifecycle(sweepAt, day(75))
	first := renewal(jan1, "inv_1", "pay_1")
	cases := []struct {
		name string
		// inPlace delivers the cancellation in its place, late after
		// the events that follow it.
		inPlace, late []SubscriptionEvent
	}{
		{"a charge after it",
			[]SubscriptionEvent{first, cancel(day(10)), renewal(day(31), "inv_2", "pay_2")},
			[]SubscriptionEvent{first, renewal(day(31), "inv_2", "pay_2"), cancel(day(10))}},
		{"a charge at its very moment",
			[]SubscriptionEvent{first, cancel(feb1), renewal(feb1, "inv_2", "pay_2")},
			[]SubscriptionEvent{first, renewal(feb1, "inv_2", "pay_2"), cancel(feb1)}},
		{"a charge after it, then a purchase",
			[]SubscriptionEvent{first, cancel(day(10)), renewal(day(31), "inv_2", "pay_2"), purchase(day(40), "inv_3", "pay_3")},
			[]SubscriptionEvent{first, renewal(day(31), "inv_2", "pay_2"), purchase(day(40), "inv_3", "pay_3"), cancel(day(10))}},
		{"a charge after it, the access ended, another charge",
			[]SubscriptionEvent{first, cancel(day(10)), renewal(day(31), "inv_2", "pay_2"), sweep, renewal(day(90), "inv_3", "pay_3")},
			[]SubscriptionEvent{first, renewal(day(31), "inv_2", "pay_2"), sweep, cancel(day(10)), renewal(day(90), "inv_3", "pay_3")}},
		{"a charge after it, then a later cancellation",
			[]SubscriptionEvent{first, cancel(day(10)), renewal(day(31), "inv_2", "pay_2"), cancel(day(45))},
			[]SubscriptionEvent{first, renewal(day(31), "inv_2", "pay_2"), cancel(day(45)), cancel(day(10))}},
		{"a charge after it, refunded before its period began",
			[]SubscriptionEvent{first, cancel(day(10)), renewal(day(15), "inv_2", "pay_2"), refundOf(SubRefunded, day(20), "inv_2", "pay_2")},
			[]SubscriptionEvent{first, renewal(day(15), "inv_2", "pay_2"), refundOf(SubRefunded, day(20), "inv_2", "pay_2"), cancel(day(10))}},
		{"a charge after it, refunded before its period began, then another charge",
			[]SubscriptionEvent{first, cancel(day(10)), renewal(day(15), "inv_2", "pay_2"), refundOf(SubRefunded, day(20), "inv_2", "pay_2"),
				renewal(day(31), "inv_3", "pay_3")},
			[]SubscriptionEvent{first, renewal(day(15), "inv_2", "pay_2"), refundOf(SubRefunded, day(20), "inv_2", "pay_2"), cancel(day(10)),
				renewal(day(31), "inv_3", "pay_3")}},
		{"a charge after it, refunded once its period began, the access ended",
			[]SubscriptionEvent{first, cancel(day(10)), renewal(day(31), "inv_2", "pay_2"), refundOf(SubRefunded, day(35), "inv_2", "pay_2"), sweep},
			[]SubscriptionEvent{first, renewal(day(31), "inv_2", "pay_2"), refundOf(SubRefunded, day(35), "inv_2", "pay_2"), sweep, cancel(day(10))}},
		{"an overdue notice after it, then a charge",
			[]SubscriptionEvent{first, cancel(day(10)), lifecycle(SubOverdue, day(32)), renewal(day(40), "inv_2", "pay_2")},
			[]SubscriptionEvent{first, lifecycle(SubOverdue, day(32)), cancel(day(10)), renewal(day(40), "inv_2", "pay_2")}},
		{"a purchase at its very moment",
			[]SubscriptionEvent{first, cancel(day(40)), purchase(day(40), "inv_2", "pay_2")},
			[]SubscriptionEvent{first, purchase(day(40), "inv_2", "pay_2"), cancel(day(40))}},
		{"the first purchase dated after it (undated: its receipt stands in), then a charge after it",
			[]SubscriptionEvent{purchase(day(40), "inv_1", "pay_1"), cancel(day(10)), renewal(day(31), "inv_2", "pay_2")},
			[]SubscriptionEvent{purchase(day(40), "inv_1", "pay_1"), renewal(day(31), "inv_2", "pay_2"), cancel(day(10))}},
		{"a purchase before it, announced after it",
			[]SubscriptionEvent{first, purchase(day(5), "inv_2", "pay_2"), cancel(day(10))},
			[]SubscriptionEvent{first, cancel(day(10)), purchase(day(5), "inv_2", "pay_2")}},
		{"the first purchase dated after it, announced after it",
			[]SubscriptionEvent{purchase(day(40), "inv_1", "pay_1"), cancel(day(10))},
			[]SubscriptionEvent{cancel(day(10)), purchase(day(40), "inv_1", "pay_1")}},
		{"a purchase between it and a later cancellation",
			[]SubscriptionEvent{first, cancel(day(10)), purchase(day(20), "inv_2", "pay_2"), cancel(day(30))},
			[]SubscriptionEvent{first, cancel(day(30)), purchase(day(20), "inv_2", "pay_2"), cancel(day(10))}},
		{"a charge and a purchase at its very moment",
			[]SubscriptionEvent{first, cancel(day(20)), renewal(day(20), "inv_2", "pay_2"), purchase(day(20), "inv_3", "pay_3")},
			[]SubscriptionEvent{first, renewal(day(20), "inv_2", "pay_2"), purchase(day(20), "inv_3", "pay_3"), cancel(day(20))}},
		{"the access ended without a charge, then a charge",
			[]SubscriptionEvent{first, cancel(day(10)), sweep, renewal(day(90), "inv_3", "pay_3")},
			[]SubscriptionEvent{first, sweep, cancel(day(10)), renewal(day(90), "inv_3", "pay_3")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inPlace, inPlaceItems := tell(tc.inPlace...)
			late, lateItems := tell(tc.late...)
			if late.State != inPlace.State || !late.CancelledAt.Equal(inPlace.CancelledAt) || !maps.Equal(lateItems, inPlaceItems) {
				t.Errorf("late: %s, cancelled at %s, items %v\nin place: %s, cancelled at %s, items %v",
					late.State, late.CancelledAt, lateItems, inPlace.State, inPlace.CancelledAt, inPlaceItems)
			}
			// Announced again, it changes nothing.
			again := append(slices.Clone(tc.late), tc.late[len(tc.late)-1])
			if tc.late[len(tc.late)-1].Kind == SubCancelledEvent {
				if sub, items := tell(again...); sub.State != late.State || !sub.CancelledAt.Equal(late.CancelledAt) || !maps.Equal(items, lateItems) {
					t.Errorf("announced again: %s, cancelled at %s, items %v", sub.State, sub.CancelledAt, items)
				}
			}
		})
	}
}

func refundOf(kind SubscriptionEventKind, at time.Time, invoice, payment string) SubscriptionEvent {
	return SubscriptionEvent{Kind: kind, OccurredAt: at, InvoiceID: invoice, PaymentID: payment}
}

// Refunds of a subscription's payments. A full refund of the payment of
// the latest period cuts that period's access at the refund when it had
// begun — access ends then, once, announced, with an item since the
// access was used — and takes all of it when it had not (the paid period
// before it runs on, no item). A refund of an earlier period, or after
// access ended, cuts nothing and opens an item; a partial refund keeps
// access and opens an item; the same refund again is already applied.
func TestSubscriptionRefunds(t *testing.T) {
	t.Parallel()
	feb1, mar1 := jan1.AddDate(0, 1, 0), jan1.AddDate(0, 2, 0)
	paid := []SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), renewal(feb1, "inv_2", "pay_2")}
	events := func(more ...SubscriptionEvent) []SubscriptionEvent { return append(paid[:2:2], more...) }
	cases := []struct {
		name   string
		events []SubscriptionEvent
		// the last event's decision and effects
		decision Decision
		effects  []Effect
		// what the subscription grants on day 50 (Feb 20, within the
		// second period), until when and why
		granted bool
		until   time.Time
		why     string
	}{
		{"the latest period's payment refunded after it began: access ends at the refund",
			events(refundOf(SubRefunded, day(40), "inv_2", "pay_2")), DecisionSubscriptionRefunded,
			[]Effect{RefundPeriod{2, day(40)}, EndAccess{}, MoveSubscription{SubExpired}, Publish{TopicSubscriptionAccessEnded}, OpenItem{ReconRefundAfterFulfill}},
			false, time.Time{}, "access ended: the payment of period 2 was refunded"},
		{"the same refund again: once",
			events(refundOf(SubRefunded, day(40), "inv_2", "pay_2"), refundOf(SubRefunded, day(41), "inv_2", "pay_2")), DecisionAlreadyApplied, nil,
			false, time.Time{}, "access ended: the payment of period 2 was refunded"},
		{"the latest period's payment refunded before it began: none of it, the paid period runs on",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), renewal(day(20), "inv_2", "pay_2"), refundOf(SubRefunded, day(25), "inv_2", "pay_2")},
			DecisionSubscriptionRefunded, []Effect{RefundPeriod{2, feb1}},
			false, feb1.Add(monthly.Grace), "grace while the renewal is awaited ended"},
		{"the period in use refunded after the one paid ahead of it was: it is the latest in force, access ends at the refund",
			[]SubscriptionEvent{renewal(jan1, "inv_1", "pay_1"), renewal(day(20), "inv_2", "pay_2"),
				refundOf(SubRefunded, day(25), "inv_2", "pay_2"), refundOf(SubRefunded, day(26), "inv_1", "pay_1")},
			DecisionSubscriptionRefunded,
			[]Effect{RefundPeriod{1, day(26)}, EndAccess{}, MoveSubscription{SubExpired}, Publish{TopicSubscriptionAccessEnded}, OpenItem{ReconRefundAfterFulfill}},
			false, time.Time{}, "access ended: the payment of period 2 was refunded"},
		{"an earlier period's payment refunded: access is not cut",
			events(refundOf(SubRefunded, day(40), "inv_1", "pay_1")), DecisionSubscriptionRefunded,
			[]Effect{RefundPeriod{1, feb1}, OpenItem{ReconRefundAfterFulfill}}, true, mar1, "paid period"},
		{"a partial refund keeps access",
			events(refundOf(SubPartiallyRefunded, day(40), "inv_2", "pay_2")), DecisionPartiallyRefunded,
			[]Effect{OpenItem{ReconRefundAfterFulfill}}, true, mar1, "paid period"},
		{"a refund of a payment that paid no period (yet) waits for it",
			events(refundOf(SubRefunded, day(40), "inv_9", "pay_9")), DecisionUnmatched, nil, true, mar1, "paid period"},
		{"a refund of an unknown bill naming no payment",
			events(refundOf(SubRefunded, day(40), "inv_9", "")), DecisionOtherPaymentRefunded, nil, true, mar1, "paid period"},
		{"a refund naming the payment alone of a period paid under its invoice",
			events(refundOf(SubRefunded, day(40), "", "pay_2")), DecisionSubscriptionRefunded,
			[]Effect{RefundPeriod{2, day(40)}, EndAccess{}, MoveSubscription{SubExpired}, Publish{TopicSubscriptionAccessEnded},
				OpenItem{ReconRefundAfterFulfill}}, false, time.Time{}, "access ended: the payment of period 2 was refunded"},
		{"a refund of another payment of a paid bill",
			events(refundOf(SubRefunded, day(40), "inv_2", "pay_3")), DecisionOtherPaymentRefunded, nil, true, mar1, "paid period"},
		{"a refund naming no payment",
			events(refundOf(SubRefunded, day(40), "", "")), DecisionUnidentifiedRefund, []Effect{OpenItem{ReconRefundAfterFulfill}}, true, mar1, "paid period"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, sub := run(tc.events[:len(tc.events)-1]...)
			last := tc.events[len(tc.events)-1]
			out := DecideSubscription(last, sub, monthly)
			if out.Decision != tc.decision || !reflect.DeepEqual(out.Effects, tc.effects) || out.Reason == "" {
				t.Errorf("decided %s %+v (%s)\nwant    %s %+v", out.Decision, out.Effects, out.Reason, tc.decision, tc.effects)
			}
			sub.Apply(last, out)
			if len(sub.Renewals) != 2 {
				t.Errorf("%d renewals after the refund, want the 2 paid", len(sub.Renewals))
			}
			for _, e := range tc.effects {
				if rp, ok := e.(RefundPeriod); ok {
					if r, _, _ := sub.refundedRenewal(last); r.Period != rp.Period || !r.Refunded {
						t.Errorf("after the refund, its period is %+v, want period %d refunded", r, rp.Period)
					}
				}
			}
			a := sub.AccessAt(day(50), monthly)
			if a.Granted != tc.granted || !a.Until.Equal(tc.until) || a.Why != tc.why {
				t.Errorf("access on day 50 = %+v, want granted %v until %s: %q", a, tc.granted, tc.until, tc.why)
			}
			// Access ended by a refund is never ended again by the sweeper.
			if _, swept := SweepSubscription(sub, monthly, day(120)); swept == sub.AccessEnded {
				t.Errorf("swept %v on day 120 with access ended %v: want exactly one end", swept, sub.AccessEnded)
			}
		})
	}
}

// After a refund ended access, a renewal starts a new period from its
// payment, and the access it grants no longer says refunded.
func TestSubscriptionRenewedAfterRefund(t *testing.T) {
	t.Parallel()
	_, sub := run(renewal(jan1, "inv_1", "pay_1"), refundOf(SubRefunded, day(10), "inv_1", "pay_1"), renewal(day(20), "inv_2", "pay_2"))
	if a := sub.AccessAt(day(21), monthly); !a.Granted || sub.Periods != 2 || !sub.PeriodStart.Equal(day(20)) || a.Why != "paid period" {
		t.Errorf("after a renewal following the refund: %+v, %d periods from %s", a, sub.Periods, sub.PeriodStart)
	}
}

// A period of months ends on the day of the month its run of periods
// began, or on the last day of a month too short for it: never past that
// month (AddDate turns January 31st plus a month into March 3rd), and a
// run that passed through a short month keeps its day afterwards.
func TestPeriodEnds(t *testing.T) {
	t.Parallel()
	at := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 10, 30, 0, 0, time.UTC) }
	cases := []struct {
		name   string
		period Period
		start  time.Time
		day    int
		want   time.Time
	}{
		{"a month from the 1st", Period{Months: 1}, at(2027, 1, 1), 1, at(2027, 2, 1)},
		{"a month from the 15th", Period{Months: 1}, at(2027, 3, 15), 15, at(2027, 4, 15)},
		{"a month from January 31st ends on the last day of February", Period{Months: 1}, at(2027, 1, 31), 31, at(2027, 2, 28)},
		{"in a leap year, on the 29th", Period{Months: 1}, at(2028, 1, 31), 31, at(2028, 2, 29)},
		{"the run of the 31st goes back to the 31st after February", Period{Months: 1}, at(2027, 2, 28), 31, at(2027, 3, 31)},
		{"and to the 30th in a month of 30 days", Period{Months: 1}, at(2027, 3, 31), 31, at(2027, 4, 30)},
		{"the run of the 30th after February", Period{Months: 1}, at(2027, 2, 28), 30, at(2027, 3, 30)},
		{"a start on the 28th that is not the month's last keeps its day", Period{Months: 1}, at(2027, 4, 28), 31, at(2027, 5, 28)},
		{"a start on another day than its run's keeps its own (periods computed before)", Period{Months: 1}, at(2027, 3, 3), 31, at(2027, 4, 3)},
		{"a year from February 29th", Period{Months: 12}, at(2028, 2, 29), 29, at(2029, 2, 28)},
		{"a run of February 29th returns to it in a leap year", Period{Months: 12}, at(2031, 2, 28), 29, at(2032, 2, 29)},
		{"three months from November 30th", Period{Months: 3}, at(2027, 11, 30), 30, at(2028, 2, 29)},
		{"days only: counted from the start", Period{Days: 30}, at(2027, 1, 31), 31, at(2027, 3, 2)},
		{"months and days: counted from the start", Period{Months: 1, Days: 1}, at(2027, 1, 31), 31, at(2027, 3, 1)},
	}
	for _, c := range cases {
		if got := c.period.afterOn(c.start, c.day); !got.Equal(c.want) {
			t.Errorf("%s: %+v from %s (day %d) ends %s, want %s", c.name, c.period, c.start.Format(time.DateOnly), c.day,
				got.Format(time.RFC3339), c.want.Format(time.RFC3339))
		}
	}
	if got, want := (Period{Months: 1}).After(at(2027, 1, 31)), at(2027, 2, 28); !got.Equal(want) {
		t.Errorf("After(January 31st) = %s, want %s", got, want)
	}
}

// The renewals of a subscription first paid on January 31st: each period
// follows the one before, on the 31st or the month's last day — the run's
// day, read from the periods paid. A period after access ended starts a
// run of its own.
func TestMonthlyRenewalsKeepTheirDay(t *testing.T) {
	t.Parallel()
	jan31 := time.Date(2027, 1, 31, 9, 0, 0, 0, time.UTC)
	_, sub := run(renewal(jan31, "inv_1", "pay_1"), renewal(jan31.AddDate(0, 0, 27), "inv_2", "pay_2"),
		renewal(jan31.AddDate(0, 0, 58), "inv_3", "pay_3"), renewal(jan31.AddDate(0, 0, 88), "inv_4", "pay_4"))
	want := []string{"2027-01-31", "2027-02-28", "2027-03-31", "2027-04-30", "2027-05-31"}
	byNumber := map[int]Renewal{}
	for _, r := range sub.Renewals {
		byNumber[r.Period] = r
	}
	got := []string{byNumber[1].Start.Format(time.DateOnly)}
	for n := 1; n <= 4; n++ {
		got = append(got, byNumber[n].End.Format(time.DateOnly))
	}
	if !reflect.DeepEqual(got, want) || sub.Periods != 4 || !sub.PeriodEnd.Equal(time.Date(2027, 5, 31, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("periods run %v (%d periods, ending %s), want %v", got, sub.Periods, sub.PeriodEnd, want)
	}

	// Access ended on May 31st; a payment on June 15th starts a run of the
	// 15th.
	sub.State = SubExpired
	jun15 := time.Date(2027, 6, 15, 12, 0, 0, 0, time.UTC)
	out := DecideSubscription(renewal(jun15, "inv_5", "pay_5"), sub, monthly)
	if len(out.Effects) == 0 {
		t.Fatalf("renewal after expiry: %+v", out)
	}
	if g, ok := out.Effects[0].(GrantPeriod); !ok || !g.Start.Equal(jun15) || !g.End.Equal(jun15.AddDate(0, 1, 0)) {
		t.Errorf("renewal after expiry grants %+v, want June 15th to July 15th", out.Effects[0])
	}
}

// A renewal paid before its subscription's access ended, and announced
// only after the sweeper ended it, pays the period it was due for — as it
// would have, announced on time — not a period from its payment, which
// would overlap the one paid.
func TestSubscriptionRenewalAnnouncedAfterTheSweep(t *testing.T) {
	t.Parallel()
	feb1, mar1 := jan1.AddDate(0, 1, 0), jan1.AddDate(0, 2, 0)
	for _, tc := range []struct {
		name       string
		paid       time.Time
		start, end time.Time
	}{
		{"paid within the period", day(30), feb1, mar1},
		{"paid within the grace", feb1.Add(time.Hour), feb1, mar1},
		{"paid after access ended: a period from its payment", feb1.Add(monthly.Grace + time.Hour),
			feb1.Add(monthly.Grace + time.Hour), mar1.Add(monthly.Grace + time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, sub := run(renewal(jan1, "inv_1", "pay_1"))
			sub = sweptAt(t, sub, day(40))
			ev := renewal(tc.paid, "inv_2", "pay_2")
			out := DecideSubscription(ev, sub, monthly)
			sub.Apply(ev, out)
			if out.Decision != DecisionRenewed || !sub.PeriodStart.Equal(tc.start) || !sub.PeriodEnd.Equal(tc.end) || sub.State != SubActive {
				t.Errorf("%s, period 2 %s .. %s (%s); want renewed, %s .. %s", out.Decision, sub.PeriodStart, sub.PeriodEnd,
					sub.State, tc.start, tc.end)
			}
		})
	}
}

// A period paid ahead and refunded before it began cut no access: the
// sweeper ended it at the end of the period before and its grace, and a
// renewal paid within that grace, announced after the sweep, pays the
// period it was due for.
func TestSubscriptionRenewalAfterTheSweepPastARefundedAheadPeriod(t *testing.T) {
	t.Parallel()
	feb1 := jan1.AddDate(0, 1, 0)
	_, sub := run(renewal(jan1, "inv_1", "pay_1"), renewal(day(20), "inv_2", "pay_2"), refundOf(SubRefunded, day(25), "inv_2", "pay_2"))
	sub = sweptAt(t, sub, feb1.Add(monthly.Grace+time.Hour))
	ev := renewal(feb1.Add(time.Hour), "inv_3", "pay_3")
	out := DecideSubscription(ev, sub, monthly)
	sub.Apply(ev, out)
	if out.Decision != DecisionRenewed || !sub.PeriodStart.Equal(feb1) {
		t.Errorf("%s: period 3 starts %s, want %s", out.Decision, sub.PeriodStart, feb1)
	}
}

// A cancelled subscription has no grace: once the sweeper ended its access
// at the end of its period, buying the plan again a day later starts a
// period from that purchase.
func TestSubscriptionBoughtAgainAfterCancelledAccessEnded(t *testing.T) {
	t.Parallel()
	feb1 := jan1.AddDate(0, 1, 0)
	_, sub := run(renewal(jan1, "inv_1", "pay_1"), lifecycle(SubCancelledEvent, day(10)))
	sub = sweptAt(t, sub, feb1.Add(time.Hour))
	bought := renewal(feb1.Add(24*time.Hour), "inv_2", "pay_2")
	bought.Purchase = true
	out := DecideSubscription(bought, sub, monthly)
	sub.Apply(bought, out)
	if out.Decision != DecisionRenewed || !sub.PeriodStart.Equal(bought.OccurredAt) || sub.State != SubActive {
		t.Errorf("%s, period 2 from %s (%s); want renewed from the purchase, %s", out.Decision, sub.PeriodStart, sub.State, bought.OccurredAt)
	}
}

// A monthly run from the 31st keeps its day past a period paid ahead and
// refunded before it began: the next period follows the one in force.
func TestMonthlyRunKeepsItsDayPastARefundedPeriod(t *testing.T) {
	t.Parallel()
	jan31 := time.Date(2027, 1, 31, 9, 0, 0, 0, time.UTC)
	_, sub := run(renewal(jan31, "inv_1", "pay_1"), renewal(jan31.AddDate(0, 0, 20), "inv_2", "pay_2"),
		refundOf(SubRefunded, jan31.AddDate(0, 0, 25), "inv_2", "pay_2"), renewal(jan31.AddDate(0, 0, 27), "inv_3", "pay_3"))
	if want := time.Date(2027, 3, 31, 9, 0, 0, 0, time.UTC); sub.Periods != 3 || !sub.PeriodEnd.Equal(want) {
		t.Errorf("period %d ends %s, want period 3 ending %s", sub.Periods, sub.PeriodEnd, want)
	}
}

// A period ends on a day of the month in the zone its times were read in
// (pgx reads timestamptz in the process's): a run counted by a process in
// Moscow time goes on as it began there — counting it again in another
// zone would move its day for customers near midnight. Replicas must share
// their zone (docs/operating.md).
func TestPeriodsKeepTheZoneTheirRunWasCountedIn(t *testing.T) {
	t.Parallel()
	msk := time.FixedZone("MSK", 3*3600)
	start := time.Date(2027, 1, 31, 1, 0, 0, 0, msk)
	end := time.Date(2027, 2, 28, 1, 0, 0, 0, msk)
	sub := Subscription{State: SubActive, Periods: 1, PeriodStart: start, PeriodEnd: end,
		Renewals: map[string]Renewal{"invoice:inv_1": {Period: 1, PaymentID: "pay_1", Start: start, End: end, PaidAt: start}}}
	ev := renewal(time.Date(2027, 2, 20, 0, 0, 0, 0, time.UTC), "inv_2", "pay_2")
	sub.Apply(ev, DecideSubscription(ev, sub, monthly))
	if want := time.Date(2027, 3, 31, 1, 0, 0, 0, msk); !sub.PeriodEnd.Equal(want) {
		t.Errorf("period 2 ends %s, want %s (the run of the 31st)", sub.PeriodEnd.In(msk), want)
	}
}

// One payment pays one period, whichever of its keys an announcement
// names: announced again without its invoice, it is already applied.
func TestSubscriptionPaymentAnnouncedUnderAnotherKey(t *testing.T) {
	t.Parallel()
	ds, sub := run(renewal(jan1, "inv_1", "pay_1"), renewal(day(30), "inv_2", "pay_2"), renewal(day(31), "", "pay_2"))
	if got := decisions(ds...); got != "renewed,renewed,already_applied" || sub.Periods != 2 {
		t.Errorf("decisions %s, %d periods; want the second payment applied once", got, sub.Periods)
	}
}
