package fulfillment

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestProviderOrderID(t *testing.T) {
	t.Parallel()
	const order = "0b9f3c2e-6f1a-4d2b-9a7e-1c2d3e4f5a6b"
	first, again, second := ProviderOrderID(order, 1), ProviderOrderID(order, 1), ProviderOrderID(order, 2)
	if first != "0b9f3c2e6f1a4d2b9a7e1c2d3e4f5a6b-1" || first != again {
		t.Errorf("attempt 1: %q then %q, want one stable id", first, again)
	}
	if second == first {
		t.Errorf("attempt 2 reuses attempt 1's id %q", first)
	}
	// T-Bank takes an OrderId of 36 characters at most.
	if last := ProviderOrderID(order, MaxPaymentStarts); len(last) > 36 {
		t.Errorf("%q is %d characters long", last, len(last))
	}
}

func TestNextStart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	start := func(state StartState, attempt int, busyUntil time.Time) *PaymentStart {
		return &PaymentStart{State: state, Attempt: attempt, BusyUntil: busyUntil}
	}
	cases := []struct {
		name       string
		latest     *PaymentStart
		newAttempt bool
		replace    int
		want       StartStep
		wantErr    error
	}{
		{"first call", nil, false, 0, StepNew, nil},
		{"first call asking for a new attempt", nil, true, 0, StepNew, nil},
		{"started: the same attempt again", start(StartStarted, 1, time.Time{}), false, 0, StepReturn, nil},
		{"started, new attempt asked for", start(StartStarted, 1, time.Time{}), true, 0, StepNew, nil},
		{"another call is asking the provider", start(StartStarting, 1, now.Add(time.Second)), false, 0, 0, ErrStartBusy},
		{"another call is asking, even for a new attempt", start(StartStarting, 1, now.Add(time.Second)), true, 0, 0, ErrStartBusy},
		{"an answer was lost: ask again under the same id", start(StartStarting, 1, now.Add(-time.Second)), false, 0, StepAsk, nil},
		{"busy mark ends now", start(StartStarting, 1, now), false, 0, StepAsk, nil},
		{"failed: a new attempt", start(StartFailed, 3, time.Time{}), false, 0, StepNew, nil},
		{"review: returned until a new attempt is asked for", start(StartReview, 1, time.Time{}), false, 0, StepReturn, nil},
		{"review, new attempt asked for", start(StartReview, 1, time.Time{}), true, 0, StepNew, nil},
		{"last attempt failed", start(StartFailed, MaxPaymentStarts, time.Time{}), false, 0, 0, ErrFailedPrecondition},
		{"last attempt started: returned", start(StartStarted, MaxPaymentStarts, time.Time{}), false, 0, StepReturn, nil},
		{"no attempt left", start(StartStarted, MaxPaymentStarts, time.Time{}), true, 0, 0, ErrFailedPrecondition},
		{"replacing the latest attempt", start(StartStarted, 2, time.Time{}), true, 2, StepNew, nil},
		{"a retried replacement: the replacement is returned", start(StartStarted, 3, time.Time{}), true, 2, StepReturn, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := NextStart(tc.latest, tc.newAttempt, tc.replace, now)
			if !errors.Is(err, tc.wantErr) || (err == nil && got != tc.want) {
				t.Errorf("NextStart = %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestSameAttempt(t *testing.T) {
	t.Parallel()
	s := PaymentStart{ProviderOrderID: "abc-1", Amount: Money{Currency: "RUB", MinorUnits: 19200}}
	same := ProviderPayment{Account: "T1", ProviderOrderID: "abc-1", PaymentID: "42", Amount: Money{Currency: "RUB", MinorUnits: 19200}}
	if err := SameAttempt(s, "T1", same); err != nil {
		t.Errorf("the attempt's own payment: %v", err)
	}
	cases := []struct {
		name   string
		change func(*ProviderPayment)
		want   string
	}{
		{"another terminal", func(p *ProviderPayment) { p.Account = "T2" }, `account "T2", not "T1"`},
		{"another order id", func(p *ProviderPayment) { p.ProviderOrderID = "abc-2" }, `order id "abc-2", not "abc-1"`},
		{"another amount", func(p *ProviderPayment) { p.Amount.MinorUnits = 100 }, "amount 100 RUB, not 19200 RUB"},
		{"another currency", func(p *ProviderPayment) { p.Amount.Currency = "USD" }, "amount 19200 USD, not 19200 RUB"},
		{"all of them", func(p *ProviderPayment) { p.Account, p.Amount.MinorUnits = "T2", 1 }, `account "T2", not "T1"; amount 1 RUB`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := same
			tc.change(&p)
			err := SameAttempt(s, "T1", p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "payment 42") {
				t.Errorf("SameAttempt = %v, want it to name payment 42 and %q", err, tc.want)
			}
		})
	}
}
