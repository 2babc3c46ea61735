package fulfillment

import (
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

// REVIEW: an order stored before 9dfc64a with tolerance == amount (the old
// validation allowed it; no migration or runtime guard changes it) is still
// paid in full by a confirmation of one smallest unit: the new
// IsPositive guard only stops exactly zero.
func TestReviewToleranceOfTheWholeAmountStillPaysForDust(t *testing.T) {
	t.Parallel()
	order := &PaidOrder{State: StatePendingPayment, Settlement: &Settlement{Token: "USDT", Network: "TRON",
		Amount: decimal.RequireFromString("25"), Tolerance: decimal.RequireFromString("25")}}
	ev := ProviderEvent{Environment: EnvLive, Kind: EventPaymentConfirmed, Type: "payment.confirmed",
		Payment: PaymentInfo{AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1", MerchantOrderID: "m-1",
			Amount: TokenAmount(decimal.RequireFromString("0.000000000000000001"), "USDT", "TRON")}}
	if out := Decide(ev, order); out.Decision == DecisionFulfilled {
		t.Errorf("a confirmation of 1e-18 USDT fulfils an order of 25 USDT (tolerance 25): %s", out.Reason)
	}
}

// REVIEW: a partial refund that cannot be compared (another currency) of an
// overpaid, fulfilled order takes the new "returns the excess" branch,
// because minorUnits() is 0 for it: its reason says it returned the excess
// and that nothing else is owed, which is not what happened.
func TestReviewRefundInAnotherCurrencyIsNotTheExcess(t *testing.T) {
	t.Parallel()
	order := &PaidOrder{State: StateFulfilled, Total: Money{Currency: "RUB", MinorUnits: 1000}, Paid: true,
		PaidBy: PaidRefs{AttemptRef: "pay_1", PaymentID: "pay_1"}, PaidAmount: MinorAmount(1200, "RUB")}
	p := PaymentInfo{PaymentID: "pay_1", AttemptRef: "pay_1", Amount: MinorAmount(900, "USD")}
	ev := ProviderEvent{Provider: ProviderTBank, Environment: EnvLive, EventID: "r1", Kind: EventPartiallyRefunded,
		Type: string(EventPartiallyRefunded), Payment: p}
	out := Decide(ev, order)
	if strings.Contains(out.Reason, "beyond the order's total") {
		t.Errorf("a refund of 900 USD of a RUB order is said to return the RUB excess: %s", out.Reason)
	}
}

// REVIEW: the same events decided in another order take back different
// amounts. An order of 1000 paid 1900 (900 too much), the whole payment
// refunded in partial refunds of 900 and 1000: after the confirmation, the
// first returns the excess and the second the price (1000 taken back);
// before it, the second is refund_not_applicable (left is bounded by the
// total while the payment is unknown) and is never recorded, so the
// confirmation takes back nothing although the whole payment went back.
func TestReviewOverpaymentRefundsDependOnDeliveryOrder(t *testing.T) {
	t.Parallel()
	event := func(kind EventKind, id string, minor int64) ProviderEvent {
		p := PaymentInfo{PaymentID: "pay_1", CheckoutSessionID: "cs_1", Amount: MinorAmount(minor, "RUB")}
		p.AttemptRef = p.Attempt()
		return ProviderEvent{Provider: ProviderTBank, Environment: EnvLive, EventID: id, Kind: kind, Type: string(kind), Payment: p}
	}
	confirm := event(EventPaymentConfirmed, "c", 1900)
	r1 := event(EventPartiallyRefunded, "r1", 900)
	r2 := event(EventPartiallyRefunded, "r2", 1000)
	takenBack := func(evs ...ProviderEvent) (int64, []Decision) {
		order := &PaidOrder{State: StatePendingPayment, Total: Money{Currency: "RUB", MinorUnits: 1000}}
		var sum int64
		var ds []Decision
		for _, ev := range evs {
			out := Decide(ev, order)
			ds = append(ds, out.Decision)
			for _, e := range out.Effects {
				if r, ok := e.(ReverseCreditShare); ok {
					sum += r.Refunded.MinorUnits
				}
			}
			order.Apply(ev, out)
		}
		return sum, ds
	}
	after, da := takenBack(confirm, r1, r2)
	before, db := takenBack(r1, r2, confirm)
	if after != before {
		t.Errorf("refunds after the confirmation take back %d of 1000 (%v); the same refunds before it take back %d (%v)",
			after, da, before, db)
	}
}
