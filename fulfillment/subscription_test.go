package fulfillment

import (
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
	out, swept := SweepSubscription(sub, monthly, day(60))
	if !swept {
		t.Fatal("not swept")
	}
	sub.Apply(SubscriptionEvent{OccurredAt: day(60)}, out)
	ev := renewal(day(70), "inv_2", "pay_2")
	out = DecideSubscription(ev, sub, monthly)
	sub.Apply(ev, out)
	if out.Decision != DecisionRenewed || !sub.PeriodStart.Equal(day(70)) || sub.State != SubActive || !sub.AccessAt(day(71), monthly).Granted {
		t.Errorf("renewal after expiry: %s, period from %s, %s", out.Decision, sub.PeriodStart, sub.State)
	}
}
