package fulfillment

import (
	"testing"

	"github.com/shopspring/decimal"
)

// benchDecide decides ev against order in a loop, after checking once that
// it takes the intended path.
func benchDecide(b *testing.B, ev ProviderEvent, order *PaidOrder, want Decision) {
	b.Helper()
	if got := Decide(ev, order).Decision; got != want {
		b.Fatalf("decision %s, want %s", got, want)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = Decide(ev, order)
	}
}

// BenchmarkDecide is the order state machine on the events a batch is made
// of: a confirmed payment of an unpaid order (in tokens, as Yolfi pays, and
// in roubles, as T-Bank does), the same payment delivered again, and a
// second payment of a paid order.
func BenchmarkDecide(b *testing.B) {
	settlement := &Settlement{Token: "USDT", Network: "TRON", Amount: decimal.RequireFromString("25"), Tolerance: decimal.RequireFromString("0.5")}
	confirmed := ProviderEvent{Provider: ProviderYolfi, Environment: EnvLive, Kind: EventPaymentConfirmed, Type: "payment.confirmed",
		Payment: PaymentInfo{AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1", MerchantOrderID: "m-1",
			Amount: TokenAmount(decimal.RequireFromString("25.000000"), "USDT", "TRON")}}
	unpaid := &PaidOrder{State: StatePendingPayment, Settlement: settlement, Total: Money{Currency: "USD", MinorUnits: 2500},
		Attempts: map[AttemptKey]AttemptState{{ProviderYolfi, "inv_1"}: AttemptCreated}}
	paid := &PaidOrder{State: StateFulfilled, Settlement: settlement, Total: unpaid.Total, Paid: true,
		PaidBy:   PaidRefs{AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1"},
		Attempts: map[AttemptKey]AttemptState{{ProviderYolfi, "inv_1"}: AttemptConfirmed}}
	second := confirmed
	second.Payment.AttemptRef, second.Payment.InvoiceID, second.Payment.PaymentID = "inv_2", "inv_2", "pay_2"

	rub := ProviderEvent{Provider: ProviderTBank, Environment: EnvLive, Kind: EventPaymentConfirmed, Type: "CONFIRMED",
		Payment: PaymentInfo{AttemptRef: "8742591", PaymentID: "8742591", CheckoutSessionID: "201709", Amount: MinorAmount(9855, "RUB")}}
	unpaidRUB := &PaidOrder{State: StatePendingPayment, Total: Money{Currency: "RUB", MinorUnits: 9855}}

	b.Run("confirmed_unpaid_token", func(b *testing.B) { benchDecide(b, confirmed, unpaid, DecisionFulfilled) })
	b.Run("confirmed_unpaid_rub", func(b *testing.B) { benchDecide(b, rub, unpaidRUB, DecisionFulfilled) })
	b.Run("redelivered", func(b *testing.B) { benchDecide(b, confirmed, paid, DecisionAlreadyApplied) })
	b.Run("second_payment", func(b *testing.B) { benchDecide(b, second, paid, DecisionDuplicatePayment) })
}

// BenchmarkDecideSubscription is the subscription rules on a renewal: the
// fourth period of a monthly plan paid by a new invoice, and that renewal
// delivered again.
func BenchmarkDecideSubscription(b *testing.B) {
	sub := Subscription{State: SubActive, Periods: 3, PeriodStart: day(59), PeriodEnd: day(90), LastEventAt: day(59),
		Renewals: map[string]Renewal{}}
	for i, inv := range []string{"inv_1", "inv_2", "inv_3"} {
		sub.Renewals["invoice:"+inv] = Renewal{Period: i + 1, PaymentID: "pay_" + inv}
	}
	for _, c := range []struct {
		name string
		ev   SubscriptionEvent
		want Decision
	}{
		{"renewal", renewal(day(89), "inv_4", "pay_4"), DecisionRenewed},
		{"renewal_redelivered", renewal(day(60), "inv_3", "pay_inv_3"), DecisionAlreadyApplied},
	} {
		b.Run(c.name, func(b *testing.B) {
			if got := DecideSubscription(c.ev, sub, monthly).Decision; got != c.want {
				b.Fatalf("decision %s, want %s", got, c.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = DecideSubscription(c.ev, sub, monthly)
			}
		})
	}
}
