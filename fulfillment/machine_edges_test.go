package fulfillment

import (
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

// An order whose tolerance is its whole amount (validation allowed it
// before it had to be less, and such orders are stored) is not paid in
// full by a confirmation of one smallest unit: it accepts no shortfall.
func TestToleranceOfTheWholeAmountAcceptsNoShortfall(t *testing.T) {
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

// A partial refund that cannot be compared (in another currency) of an
// overpaid, fulfilled order is not said to return the excess: nothing says
// what it returned.
func TestRefundInAnotherCurrencyIsNotTheExcess(t *testing.T) {
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

// The same events decided in another order take back the same. An order
// of 1000 paid 1900 (900 too much), the whole payment refunded in partial
// refunds of 900 and 1000: after the confirmation, the first returns the
// excess and the second the price (1000 taken back); before it, both are
// recorded (what the payment paid is not known yet), and the confirmation
// takes back the same 1000.
func TestOverpaymentRefundsWhateverTheDeliveryOrder(t *testing.T) {
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
	if after != 1000 || before != 1000 {
		t.Errorf("refunds after the confirmation take back %d of 1000 (%v); the same refunds before it take back %d (%v)",
			after, da, before, db)
	}
}
