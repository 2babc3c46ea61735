package fulfillment

import (
	"testing"

	"github.com/shopspring/decimal"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	settlement := &Settlement{Token: "USDT", Network: "TRON", Amount: decimal.RequireFromString("25"), Tolerance: decimal.RequireFromString("0.5")}
	pending := &PaidOrder{State: StatePendingPayment, Settlement: settlement}
	paid := &PaidOrder{State: StateFulfilled, Settlement: settlement, PaidAttemptRef: "inv_1", PaidPaymentID: "pay_1"}
	held := &PaidOrder{State: StateOnHold, Settlement: settlement, PaidAttemptRef: "inv_1", PaidPaymentID: "pay_1"}
	external := &PaidOrder{State: StatePendingPayment, Settlement: settlement, HasExternalLines: true}
	noSettlement := &PaidOrder{State: StatePendingPayment}
	cancelled := &PaidOrder{State: StateCancelled, Settlement: settlement}

	confirmed := func(amount, token, network string) ProviderEvent {
		return ProviderEvent{Environment: EnvLive, Kind: EventPaymentConfirmed, Type: "payment.confirmed",
			Payment: PaymentInfo{AttemptRef: "inv_1", PaymentID: "pay_1", Amount: decimal.RequireFromString(amount), HasAmount: true, Token: token, Network: network}}
	}
	other := confirmed("25", "USDT", "TRON")
	other.Payment.AttemptRef, other.Payment.PaymentID = "inv_2", "pay_2"
	samePaymentOtherRef := confirmed("25", "USDT", "TRON")
	samePaymentOtherRef.Payment.PaymentID = "pay_9"
	noAmount := confirmed("25", "USDT", "TRON")
	noAmount.Payment.HasAmount = false
	testMode := confirmed("25", "USDT", "TRON")
	testMode.TestMode = true
	testModeOnTest := testMode
	testModeOnTest.Environment = EnvTest
	kind := func(k EventKind) ProviderEvent {
		return ProviderEvent{Environment: EnvLive, Kind: k, Type: string(k), Payment: PaymentInfo{AttemptRef: "inv_1"}}
	}

	cases := []struct {
		name  string
		ev    ProviderEvent
		order *PaidOrder
		want  Outcome // Reason is not compared
	}{
		{"confirmed exact", confirmed("25", "USDT", "TRON"), pending,
			Outcome{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"confirmed within tolerance", confirmed("24.5", "USDT", "TRON"), pending,
			Outcome{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"confirmed under tolerance", confirmed("24.499999", "USDT", "TRON"), pending,
			Outcome{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"confirmed over", confirmed("25.000001", "USDT", "TRON"), pending,
			Outcome{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed, Item: ReconOverpayment}},
		{"other token", confirmed("25", "USDC", "TRON"), pending,
			Outcome{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"other network", confirmed("25", "USDT", "ETH"), pending,
			Outcome{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"no amount", noAmount, pending,
			Outcome{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"no settlement", confirmed("25", "USDT", "TRON"), noSettlement,
			Outcome{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"external lines wait", confirmed("25", "USDT", "TRON"), external,
			Outcome{Decision: DecisionFulfilled, NewState: StateFulfilling, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"same payment again", confirmed("25", "USDT", "TRON"), paid,
			Outcome{Decision: DecisionAlreadyApplied, Attempt: AttemptConfirmed}},
		{"second attempt", other, paid,
			Outcome{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"second payment on the same attempt", samePaymentOtherRef, paid,
			Outcome{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"payment on held order", other, held,
			Outcome{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"payment on cancelled order", confirmed("25", "USDT", "TRON"), cancelled,
			Outcome{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"unmatched payment", confirmed("25", "USDT", "TRON"), nil,
			Outcome{Decision: DecisionUnmatched, Item: ReconUnmatchedPayment}},
		{"unmatched invoice", kind(EventAttemptCreated), nil, Outcome{Decision: DecisionUnmatched}},
		{"test mode on live", testMode, pending, Outcome{Decision: DecisionTestModeIgnored}},
		{"test mode on test", testModeOnTest, pending,
			Outcome{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"other type", kind(EventOther), pending, Outcome{Decision: DecisionIgnoredType}},
		{"invoice created", kind(EventAttemptCreated), pending, Outcome{Decision: DecisionAttemptRecorded, Attempt: AttemptCreated}},
		{"invoice created late", kind(EventAttemptCreated), paid, Outcome{Decision: DecisionStaleIgnored, Attempt: AttemptCreated}},
		{"overdue while pending", kind(EventAttemptExpired), pending, Outcome{Decision: DecisionAttemptExpired, Attempt: AttemptExpired}},
		{"overdue after payment", kind(EventAttemptExpired), paid, Outcome{Decision: DecisionStaleIgnored, Attempt: AttemptExpired}},
		{"cancelled while pending", kind(EventAttemptCancelled), pending, Outcome{Decision: DecisionAttemptCancelled, Attempt: AttemptCancelled}},
		{"cancelled after payment", kind(EventAttemptCancelled), paid, Outcome{Decision: DecisionStaleIgnored, Attempt: AttemptCancelled}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Decide(tc.ev, tc.order)
			if got.Reason == "" {
				t.Error("no reason given")
			}
			got.Reason = ""
			if got != tc.want {
				t.Errorf("Decide =\n %+v\nwant\n %+v", got, tc.want)
			}
			// Only a confirmed payment of the expected settlement grants.
			if got.Grant && (tc.ev.Kind != EventPaymentConfirmed || tc.order == nil) {
				t.Error("granted without a matched confirmed payment")
			}
			// No event moves a paid order (back or forth).
			if tc.order != nil && tc.order.paid() && got.NewState != "" {
				t.Errorf("paid order moved to %s", got.NewState)
			}
		})
	}
}

func TestReconKindValid(t *testing.T) {
	t.Parallel()
	for _, k := range []ReconKind{ReconExtraPayment, ReconUnidentifiedPayment, ReconAmountMismatch, ReconFailedEvent} {
		if !k.Valid() {
			t.Errorf("%s not valid", k)
		}
	}
	for _, k := range []ReconKind{"", "refund", "Extra_payment"} {
		if k.Valid() {
			t.Errorf("%q valid", k)
		}
	}
}

func TestNextAttemptState(t *testing.T) {
	t.Parallel()
	cases := []struct{ stored, reported, want AttemptState }{
		{"", AttemptCreated, AttemptCreated},
		{"", AttemptExpired, AttemptExpired},
		{AttemptCreated, AttemptConfirmed, AttemptConfirmed},
		{AttemptCreated, AttemptExpired, AttemptExpired},
		{AttemptExpired, AttemptCreated, AttemptExpired},
		{AttemptExpired, AttemptConfirmed, AttemptConfirmed},
		{AttemptConfirmed, AttemptExpired, AttemptConfirmed},
		{AttemptConfirmed, AttemptCancelled, AttemptConfirmed},
		{AttemptConfirmed, AttemptCreated, AttemptConfirmed},
		{AttemptCancelled, AttemptExpired, AttemptExpired},
	}
	for _, tc := range cases {
		if got := NextAttemptState(tc.stored, tc.reported); got != tc.want {
			t.Errorf("NextAttemptState(%q, %q) = %q, want %q", tc.stored, tc.reported, got, tc.want)
		}
	}
}

func TestInboxStateFor(t *testing.T) {
	t.Parallel()
	for d, want := range map[Decision]InboxState{
		DecisionFulfilled: InboxProcessed, DecisionDuplicatePayment: InboxProcessed, DecisionStaleIgnored: InboxProcessed,
		DecisionUnmatched: InboxUnmatched, DecisionTestModeIgnored: InboxIgnored, DecisionIgnoredType: InboxIgnored,
	} {
		if got := InboxStateFor(d); got != want {
			t.Errorf("InboxStateFor(%s) = %s, want %s", d, got, want)
		}
	}
}
