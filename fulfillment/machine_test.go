package fulfillment

import (
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	settlement := &Settlement{Token: "USDT", Network: "TRON", Amount: decimal.RequireFromString("25"), Tolerance: decimal.RequireFromString("0.5")}
	pending := &PaidOrder{State: StatePendingPayment, Settlement: settlement}
	// Paid by an identified payment (inv_1, pay_1) …
	byPay1 := PaidRefs{AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1"}
	paid := &PaidOrder{State: StateFulfilled, Settlement: settlement, Paid: true, PaidBy: byPay1}
	held := &PaidOrder{State: StateOnHold, Settlement: settlement, Paid: true, PaidBy: byPay1}
	paidByInvoice := &PaidOrder{State: StateFulfilled, Settlement: settlement, Paid: true, PaidBy: PaidRefs{AttemptRef: "inv_1", InvoiceID: "inv_1"}}
	paidByPayment := &PaidOrder{State: StateFulfilled, Settlement: settlement, Paid: true, PaidBy: PaidRefs{AttemptRef: "pay_1", PaymentID: "pay_1"}}
	// … or by a payment that named neither invoice nor payment: no refs.
	paidUnidentified := &PaidOrder{State: StateFulfilled, Settlement: settlement, Paid: true}
	heldUnidentified := &PaidOrder{State: StateOnHold, Settlement: settlement, Paid: true}
	external := &PaidOrder{State: StatePendingPayment, Settlement: settlement, HasExternalLines: true}
	noSettlement := &PaidOrder{State: StatePendingPayment}
	cancelled := &PaidOrder{State: StateCancelled, Settlement: settlement}
	expired := &PaidOrder{State: StateExpired, Settlement: settlement}

	confirmed := func(amount, token, network string) ProviderEvent {
		return ProviderEvent{Environment: EnvLive, Kind: EventPaymentConfirmed, Type: "payment.confirmed",
			Payment: PaymentInfo{AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1", MerchantOrderID: "m-1",
				Amount: decimal.RequireFromString(amount), HasAmount: true, Token: token, Network: network}}
	}
	other := confirmed("25", "USDT", "TRON")
	other.Payment.AttemptRef, other.Payment.InvoiceID, other.Payment.PaymentID = "inv_2", "inv_2", "pay_2"
	invoiceOnly := confirmed("25", "USDT", "TRON")
	invoiceOnly.Payment.PaymentID = ""
	paymentOnly := confirmed("25", "USDT", "TRON")
	paymentOnly.Payment.AttemptRef, paymentOnly.Payment.InvoiceID = "pay_1", ""
	// Unidentifiable: a merchant order id alone, or with a checkout session
	// (which the adapter takes as the attempt ref).
	unidentified := confirmed("25", "USDT", "TRON")
	unidentified.Payment.AttemptRef, unidentified.Payment.InvoiceID, unidentified.Payment.PaymentID = "", "", ""
	sessionOnly := unidentified
	sessionOnly.Payment.AttemptRef, sessionOnly.Payment.CheckoutSessionID = "cs_1", "cs_1"
	unidentifiedShort := unidentified
	unidentifiedShort.Payment.Amount = decimal.RequireFromString("20")
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
		{"payment on expired order", confirmed("25", "USDT", "TRON"), expired,
			Outcome{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},

		// Which payment is which: paid by identified / unidentified ×
		// confirmation identified / unidentified.
		// Two payment ids tell; else two different invoices tell; else
		// nothing does.
		{"identified paid, same invoice but no payment id", invoiceOnly, paid,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"identified paid, same payment id without the invoice", paymentOnly, paid,
			Outcome{Decision: DecisionAlreadyApplied, Attempt: AttemptConfirmed}},
		{"paid by invoice only, same invoice again", invoiceOnly, paidByInvoice,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"paid by invoice only, another invoice", other, paidByInvoice,
			Outcome{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"paid by invoice only, its payment with its id", confirmed("25", "USDT", "TRON"), paidByInvoice,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"paid by payment id only, the same payment with its invoice", confirmed("25", "USDT", "TRON"), paidByPayment,
			Outcome{Decision: DecisionAlreadyApplied, Attempt: AttemptConfirmed}},
		{"paid by payment id only, invoice only", invoiceOnly, paidByPayment,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"paid by payment id only, another payment", other, paidByPayment,
			Outcome{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"identified paid, unidentified confirmation", unidentified, paid,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"identified paid, checkout session only", sessionOnly, paid,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"identified held, unidentified confirmation", unidentified, held,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unidentified paid, unidentified confirmation", unidentified, paidUnidentified,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unidentified paid, checkout session only", sessionOnly, paidUnidentified,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unidentified paid, identified confirmation", confirmed("25", "USDT", "TRON"), paidUnidentified,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unidentified paid, another amount", unidentifiedShort, paidUnidentified,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unidentified held, identified confirmation", other, heldUnidentified,
			Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unpaid, unidentified confirmation", unidentified, pending,
			Outcome{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"unpaid, checkout session only", sessionOnly, pending,
			Outcome{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"unpaid, unidentified short payment", unidentifiedShort, pending,
			Outcome{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"cancelled, unidentified confirmation", unidentified, cancelled,
			Outcome{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"expired, unidentified confirmation", unidentified, expired,
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
			reason := got.Reason
			if reason == "" {
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
			if tc.order != nil && tc.order.Paid && got.NewState != "" {
				t.Errorf("paid order moved to %s", got.NewState)
			}
			// A payment that cannot be told apart from the one that paid the
			// order is never reported as extra money.
			if tc.order != nil && tc.order.Paid && got.Item == ReconExtraPayment {
				if _, known := tc.order.PaidBy.SamePayment(tc.ev.Payment); !known {
					t.Error("a payment that cannot be told apart reported as an extra payment")
				}
			}
			if got.Decision == DecisionUnidentifiedPayment &&
				(!strings.Contains(reason, "cannot be told apart") || !strings.Contains(reason, "check at the provider")) {
				t.Errorf("reason %q does not say what to check", reason)
			}
		})
	}
}

func TestPaymentIdentified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		p          PaymentInfo
		identified bool
		want       PaidRefs
	}{
		{"invoice and payment", PaymentInfo{AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1", MerchantOrderID: "m"}, true, PaidRefs{"inv_1", "inv_1", "pay_1"}},
		{"invoice only", PaymentInfo{AttemptRef: "inv_1", InvoiceID: "inv_1", CheckoutSessionID: "cs_1"}, true, PaidRefs{"inv_1", "inv_1", ""}},
		{"payment only", PaymentInfo{AttemptRef: "pay_1", PaymentID: "pay_1"}, true, PaidRefs{"pay_1", "", "pay_1"}},
		{"merchant order id only", PaymentInfo{MerchantOrderID: "m"}, false, PaidRefs{}},
		{"checkout session only", PaymentInfo{AttemptRef: "cs_1", CheckoutSessionID: "cs_1", MerchantOrderID: "m"}, false, PaidRefs{}},
		{"paylink and transaction", PaymentInfo{MerchantOrderID: "m", PaylinkID: "pl_1", TxHash: "0xabc"}, false, PaidRefs{}},
	}
	for _, tc := range cases {
		if got := tc.p.Identified(); got != tc.identified {
			t.Errorf("%s: Identified = %v, want %v", tc.name, got, tc.identified)
		}
		if got := tc.p.PaidRefs(); got != tc.want {
			t.Errorf("%s: PaidRefs = %+v, want %+v", tc.name, got, tc.want)
		}
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
		DecisionUnidentifiedPayment: InboxProcessed, DecisionUnmatched: InboxUnmatched, DecisionTestModeIgnored: InboxIgnored, DecisionIgnoredType: InboxIgnored,
	} {
		if got := InboxStateFor(d); got != want {
			t.Errorf("InboxStateFor(%s) = %s, want %s", d, got, want)
		}
	}
}
