package fulfillment

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	settlement := &Settlement{Token: "USDT", Network: "TRON", Amount: decimal.RequireFromString("25"), Tolerance: decimal.RequireFromString("0.5")}
	pending := &PaidOrder{State: StatePendingPayment, Settlement: settlement}
	// An order created before its tolerance had to be less than its
	// amount: a confirmation of nothing is within it.
	anyAmount := &PaidOrder{State: StatePendingPayment, Settlement: &Settlement{Token: "USDT", Network: "TRON",
		Amount: decimal.RequireFromString("25"), Tolerance: decimal.RequireFromString("25")}}
	// Paid by an identified payment (inv_1, pay_1) …
	byPay1 := PaidRefs{AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1"}
	paid := &PaidOrder{State: StateFulfilled, Settlement: settlement, Paid: true, PaidBy: byPay1}
	held := &PaidOrder{State: StateOnHold, Settlement: settlement, Paid: true, PaidBy: byPay1}
	paidByInvoice := &PaidOrder{State: StateFulfilled, Settlement: settlement, Paid: true, PaidBy: PaidRefs{AttemptRef: "inv_1", InvoiceID: "inv_1"}}
	paidByPayment := &PaidOrder{State: StateFulfilled, Settlement: settlement, Paid: true, PaidBy: PaidRefs{AttemptRef: "pay_1", PaymentID: "pay_1"}}
	// … or by a payment that named neither invoice nor payment: no refs.
	paidUnidentified := &PaidOrder{State: StateFulfilled, Settlement: settlement, Paid: true}
	// … and by which event, when its payment named no payment id.
	paidByInvoiceEvent := *paidByInvoice
	paidByInvoiceEvent.PaidByEvent = "yolfi/evt_paid"
	heldUnidentified := &PaidOrder{State: StateOnHold, Settlement: settlement, Paid: true}
	external := &PaidOrder{State: StatePendingPayment, Settlement: settlement, HasExternalLines: true}
	noSettlement := &PaidOrder{State: StatePendingPayment}
	cancelled := &PaidOrder{State: StateCancelled, Settlement: settlement}
	expired := &PaidOrder{State: StateExpired, Settlement: settlement}

	confirmed := func(amount, token, network string) ProviderEvent {
		return ProviderEvent{Environment: EnvLive, Kind: EventPaymentConfirmed, Type: "payment.confirmed",
			Payment: PaymentInfo{AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1", MerchantOrderID: "m-1",
				Amount: TokenAmount(decimal.RequireFromString(amount), token, network)}}
	}
	other := confirmed("25", "USDT", "TRON")
	other.Payment.AttemptRef, other.Payment.InvoiceID, other.Payment.PaymentID = "inv_2", "inv_2", "pay_2"
	invoiceOnly := confirmed("25", "USDT", "TRON")
	invoiceOnly.Payment.PaymentID = ""
	invoiceOnlyPaid := invoiceOnly
	invoiceOnlyPaid.Provider, invoiceOnlyPaid.EventID = ProviderYolfi, "evt_paid"
	invoiceOnlyAnother := invoiceOnlyPaid
	invoiceOnlyAnother.EventID = "evt_another"
	paymentOnly := confirmed("25", "USDT", "TRON")
	paymentOnly.Payment.AttemptRef, paymentOnly.Payment.InvoiceID = "pay_1", ""
	// Unidentifiable: a merchant order id alone, or with a checkout session
	// (which the adapter takes as the attempt ref).
	unidentified := confirmed("25", "USDT", "TRON")
	unidentified.Payment.AttemptRef, unidentified.Payment.InvoiceID, unidentified.Payment.PaymentID = "", "", ""
	sessionOnly := unidentified
	sessionOnly.Payment.AttemptRef, sessionOnly.Payment.CheckoutSessionID = "cs_1", "cs_1"
	unidentifiedShort := unidentified
	unidentifiedShort.Payment.Amount.Value = decimal.RequireFromString("20")
	samePaymentOtherRef := confirmed("25", "USDT", "TRON")
	samePaymentOtherRef.Payment.PaymentID = "pay_9"
	noAmount := confirmed("25", "USDT", "TRON")
	noAmount.Payment.Amount = Amount{}
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
		want  shape
	}{
		{"confirmed exact", confirmed("25", "USDT", "TRON"), pending,
			shape{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"confirmed within tolerance", confirmed("24.5", "USDT", "TRON"), pending,
			shape{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"confirmed under tolerance", confirmed("24.499999", "USDT", "TRON"), pending,
			shape{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"confirmed over", confirmed("25.000001", "USDT", "TRON"), pending,
			shape{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed, Item: ReconOverpayment}},
		{"other token", confirmed("25", "USDC", "TRON"), pending,
			shape{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"other network", confirmed("25", "USDT", "ETH"), pending,
			shape{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"confirmed zero, within a tolerance of the whole amount", confirmed("0", "USDT", "TRON"), anyAmount,
			shape{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"confirmed negative", confirmed("-1", "USDT", "TRON"), anyAmount,
			shape{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"no amount", noAmount, pending,
			shape{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"no settlement", confirmed("25", "USDT", "TRON"), noSettlement,
			shape{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"external lines wait", confirmed("25", "USDT", "TRON"), external,
			shape{Decision: DecisionFulfilled, NewState: StateFulfilling, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"same payment again", confirmed("25", "USDT", "TRON"), paid,
			shape{Decision: DecisionAlreadyApplied, Attempt: AttemptConfirmed}},
		{"second attempt", other, paid,
			shape{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"second payment on the same attempt", samePaymentOtherRef, paid,
			shape{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"payment on held order", other, held,
			shape{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"payment on cancelled order", confirmed("25", "USDT", "TRON"), cancelled,
			shape{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"payment on expired order", confirmed("25", "USDT", "TRON"), expired,
			shape{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},

		// Which payment is which: paid by identified / unidentified ×
		// confirmation identified / unidentified.
		// Two payment ids tell; else two different invoices tell; else
		// nothing does.
		{"identified paid, same invoice but no payment id", invoiceOnly, paid,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"identified paid, same payment id without the invoice", paymentOnly, paid,
			shape{Decision: DecisionAlreadyApplied, Attempt: AttemptConfirmed}},
		{"paid by invoice only, same invoice again", invoiceOnly, paidByInvoice,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"paid by invoice only, the event that paid it again (a replay)", invoiceOnlyPaid, &paidByInvoiceEvent,
			shape{Decision: DecisionAlreadyApplied, Attempt: AttemptConfirmed}},
		{"paid by invoice only, another event of the same invoice", invoiceOnlyAnother, &paidByInvoiceEvent,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"paid by invoice only, another invoice", other, paidByInvoice,
			shape{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"paid by invoice only, its payment with its id", confirmed("25", "USDT", "TRON"), paidByInvoice,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"paid by payment id only, the same payment with its invoice", confirmed("25", "USDT", "TRON"), paidByPayment,
			shape{Decision: DecisionAlreadyApplied, Attempt: AttemptConfirmed}},
		{"paid by payment id only, invoice only", invoiceOnly, paidByPayment,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"paid by payment id only, another payment", other, paidByPayment,
			shape{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"identified paid, unidentified confirmation", unidentified, paid,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"identified paid, checkout session only", sessionOnly, paid,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"identified held, unidentified confirmation", unidentified, held,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unidentified paid, unidentified confirmation", unidentified, paidUnidentified,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unidentified paid, checkout session only", sessionOnly, paidUnidentified,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unidentified paid, identified confirmation", confirmed("25", "USDT", "TRON"), paidUnidentified,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unidentified paid, another amount", unidentifiedShort, paidUnidentified,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unidentified held, identified confirmation", other, heldUnidentified,
			shape{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment}},
		{"unpaid, unidentified confirmation", unidentified, pending,
			shape{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"unpaid, checkout session only", sessionOnly, pending,
			shape{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"unpaid, unidentified short payment", unidentifiedShort, pending,
			shape{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true, Attempt: AttemptConfirmed, Item: ReconAmountMismatch}},
		{"cancelled, unidentified confirmation", unidentified, cancelled,
			shape{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},
		{"expired, unidentified confirmation", unidentified, expired,
			shape{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment}},

		{"unmatched payment", confirmed("25", "USDT", "TRON"), nil,
			shape{Decision: DecisionUnmatched, Item: ReconUnmatchedPayment}},
		{"unmatched invoice", kind(EventAttemptCreated), nil, shape{Decision: DecisionUnmatched}},
		{"test mode on live", testMode, pending, shape{Decision: DecisionTestModeIgnored}},
		{"test mode on test", testModeOnTest, pending,
			shape{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true, Attempt: AttemptConfirmed}},
		{"other type", kind(EventOther), pending, shape{Decision: DecisionIgnoredType}},
		{"invoice created", kind(EventAttemptCreated), pending, shape{Decision: DecisionAttemptRecorded, Attempt: AttemptCreated}},
		{"invoice created late", kind(EventAttemptCreated), paid, shape{Decision: DecisionStaleIgnored, Attempt: AttemptCreated}},
		{"overdue while pending", kind(EventAttemptExpired), pending, shape{Decision: DecisionAttemptExpired, Attempt: AttemptExpired}},
		{"overdue after payment", kind(EventAttemptExpired), paid, shape{Decision: DecisionStaleIgnored, Attempt: AttemptExpired}},
		{"cancelled while pending", kind(EventAttemptCancelled), pending, shape{Decision: DecisionAttemptCancelled, Attempt: AttemptCancelled}},
		{"cancelled after payment", kind(EventAttemptCancelled), paid, shape{Decision: DecisionStaleIgnored, Attempt: AttemptCancelled}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Decide(tc.ev, tc.order)
			reason := got.Reason
			if reason == "" {
				t.Error("no reason given")
			}
			want := tc.want.outcome(tc.ev)
			if got.Decision != want.Decision || !reflect.DeepEqual(got.Effects, want.Effects) {
				t.Errorf("Decide =\n %+v\nwant\n %+v", got, want)
			}
			checkInvariants(t, tc.ev, tc.order, got)
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
		{"subscription only", PaymentInfo{MerchantOrderID: "m", SubscriptionID: "sub_1"}, false, PaidRefs{}},
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
		{AttemptConfirmed, AttemptRefunded, AttemptRefunded},
		{AttemptRefunded, AttemptConfirmed, AttemptRefunded},
		{AttemptRefunded, AttemptCreated, AttemptRefunded},
		{AttemptCreated, AttemptRefunded, AttemptRefunded},
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

// shape is an outcome as the table states it: what happens to the attempt,
// the order and its grants, and which item opens.
type shape struct {
	Decision Decision
	NewState State
	MarkPaid bool
	Grant    bool
	Attempt  AttemptState
	Item     ReconKind
}

// outcome lists shape's effects in the order Decide lists them.
func (w shape) outcome(ev ProviderEvent) Outcome {
	var effects []Effect
	if w.Attempt != "" && ev.Payment.AttemptRef != "" {
		effects = append(effects, RecordAttempt{w.Attempt})
	}
	if w.MarkPaid {
		effects = append(effects, MarkPaid{})
	}
	if w.NewState != "" {
		effects = append(effects, MoveOrder{w.NewState})
		switch w.NewState {
		case StateFulfilling:
			effects = append(effects, RequestDeliveries{})
		case StateFulfilled:
			effects = append(effects, Publish{TopicOrderFulfilled})
		case StateOnHold:
			effects = append(effects, Publish{TopicOrderOnHold})
		case StateRefunded:
			effects = append(effects, Publish{TopicOrderRefunded})
		default:
		}
	}
	if w.Grant {
		effects = append(effects, GrantLicenses{}, CreditBalances{})
	}
	if w.Item != "" {
		effects = append(effects, OpenItem{w.Item})
	}
	return Outcome{Decision: w.Decision, Effects: effects}
}

// checkInvariants holds for every outcome.
func checkInvariants(t *testing.T, ev ProviderEvent, order *PaidOrder, got Outcome) {
	t.Helper()
	for _, e := range got.Effects {
		switch e := e.(type) {
		case GrantLicenses, CreditBalances:
			// Only a confirmed payment of what the order expects grants.
			if ev.Kind != EventPaymentConfirmed || order == nil || got.Decision != DecisionFulfilled {
				t.Errorf("%T without a matched confirmed payment", e)
			}
		case MoveOrder:
			// No event moves a paid order, but a refund of its payment.
			if order.Paid && got.Decision != DecisionRefunded {
				t.Errorf("paid order moved to %s by %s", e.To, got.Decision)
			}
		case OpenItem:
			// A payment that cannot be told apart from the one that paid the
			// order is never reported as extra money.
			if e.Kind == ReconExtraPayment && order != nil && order.Paid {
				if _, known := order.PaidBy.SamePayment(ev.Payment); !known {
					t.Error("a payment that cannot be told apart reported as an extra payment")
				}
			}
		case RecordAttempt:
			if ev.Payment.AttemptRef == "" {
				t.Error("an attempt recorded for an event that names none")
			}
		}
	}
}

// Payments in a currency are compared with the order total (minor units);
// refunds follow the payment they return.
func TestDecideMoneyAndRefunds(t *testing.T) {
	t.Parallel()
	rub := func(minor int64) Amount { return MinorAmount(minor, "RUB") }
	payment := func(kind EventKind, a Amount, invoice, pay string) ProviderEvent {
		p := PaymentInfo{InvoiceID: invoice, PaymentID: pay, MerchantOrderID: "m-1", Amount: a}
		p.AttemptRef = p.Attempt()
		return ProviderEvent{Provider: ProviderTBank, Environment: EnvLive, Kind: kind, Type: string(kind), Payment: p}
	}
	settlement := &Settlement{Token: "USDT", Network: "TRON", Amount: decimal.RequireFromString("25")}
	byPay1 := PaidRefs{AttemptRef: "pay_1", PaymentID: "pay_1"}
	total := Money{Currency: "RUB", MinorUnits: 250000}
	pending := &PaidOrder{State: StatePendingPayment, Total: total}
	tokenOrder := &PaidOrder{State: StatePendingPayment, Total: Money{Currency: "USD", MinorUnits: 2500}, Settlement: settlement}
	fulfilled := &PaidOrder{State: StateFulfilled, Total: total, Paid: true, PaidBy: byPay1}
	paidByInvoice := &PaidOrder{State: StateFulfilled, Total: total, Paid: true, PaidBy: PaidRefs{AttemptRef: "inv_1", InvoiceID: "inv_1"}}
	fulfilling := &PaidOrder{State: StateFulfilling, Total: total, Paid: true, PaidBy: byPay1}
	delivering := &PaidOrder{State: StateFulfilling, Total: total, Paid: true, PaidBy: byPay1, HasExternalLines: true}
	heldExternal := &PaidOrder{State: StateOnHold, Total: total, Paid: true, PaidBy: byPay1, HasExternalLines: true}
	held := &PaidOrder{State: StateOnHold, Total: total, Paid: true, PaidBy: byPay1}
	refunded := &PaidOrder{State: StateRefunded, Total: total, Paid: true, PaidBy: byPay1}
	cancelled := &PaidOrder{State: StateCancelled, Total: total}
	// An order's subscription line for pro-yearly, paid for a subscription on pro-monthly.
	planChange := &PaidOrder{State: StatePendingPayment, Total: total, HasSubscriptionLines: true,
		PlanChange: &PlanChange{From: "pro-monthly", To: "pro-yearly"}}
	subscribed := &PaidOrder{State: StateFulfilled, Total: total, Paid: true, PaidBy: byPay1, HasSubscriptionLines: true}
	planChangeHeld := &PaidOrder{State: StateOnHold, Total: total, HasSubscriptionLines: true, Paid: true, PaidBy: byPay1,
		PlanChange: &PlanChange{From: "pro-monthly", To: "pro-yearly"}}
	// 50000 of the 250000 refunded already, of pay_1; 10000 of pay_2.
	partlyRefunded := &PaidOrder{State: StateFulfilled, Total: total, Paid: true, PaidBy: byPay1, PartialRefunds: []RecordedRefund{
		{Attempt: AttemptKey{ProviderTBank, "pay_1"}, Ref: "tbank:pay_1:50000 RUB", Amount: rub(50000)},
		{Attempt: AttemptKey{ProviderTBank, "pay_2"}, Ref: "tbank:pay_2:10000 RUB", Amount: rub(10000)}}}
	refundedFirst := &PaidOrder{State: StatePendingPayment, Total: total,
		Attempts: map[AttemptKey]AttemptState{{ProviderTBank, "pay_1"}: AttemptRefunded}}

	confirmed := RecordAttempt{AttemptConfirmed}
	refundAttempt := RecordAttempt{AttemptRefunded}
	fulfil := []Effect{confirmed, MarkPaid{}, MoveOrder{StateFulfilled}, Publish{TopicOrderFulfilled}, GrantLicenses{}, CreditBalances{}}
	hold := []Effect{confirmed, MarkPaid{}, MoveOrder{StateOnHold}, Publish{TopicOrderOnHold}, OpenItem{ReconAmountMismatch}}
	refund := []Effect{refundAttempt, MoveOrder{StateRefunded}, Publish{TopicOrderRefunded}}
	cases := []struct {
		name     string
		ev       ProviderEvent
		order    *PaidOrder
		decision Decision
		effects  []Effect
	}{
		{"currency, the total", payment(EventPaymentConfirmed, rub(250000), "", "pay_1"), pending, DecisionFulfilled, fulfil},
		{"currency, more than the total", payment(EventPaymentConfirmed, rub(250001), "", "pay_1"), pending,
			DecisionFulfilled, append(fulfil[:6:6], OpenItem{ReconOverpayment})},
		{"currency, one kopeck short", payment(EventPaymentConfirmed, rub(249999), "", "pay_1"), pending, DecisionAmountMismatch, hold},
		{"another currency", payment(EventPaymentConfirmed, MinorAmount(250000, "USD"), "", "pay_1"), pending, DecisionAmountMismatch, hold},
		{"currency, for a token-settled order priced in that currency", payment(EventPaymentConfirmed, MinorAmount(2500, "USD"), "", "pay_1"), tokenOrder,
			DecisionFulfilled, fulfil},
		{"token, for an order with no settlement", payment(EventPaymentConfirmed, TokenAmount(decimal.RequireFromString("25"), "USDT", "TRON"), "", "pay_1"), pending,
			DecisionAmountMismatch, hold},
		{"a confirmation of a refunded payment", payment(EventPaymentConfirmed, rub(250000), "", "pay_1"), refundedFirst, DecisionStaleIgnored, nil},
		{"a subscription line for another plan than the subscription paid: refused, on hold", payment(EventPaymentConfirmed, rub(250000), "", "pay_1"),
			planChange, DecisionPlanChangeRefused, append(hold[:4:4], OpenItem{ReconPlanChange})},
		{"a subscription line for another plan, paid short: the amount first", payment(EventPaymentConfirmed, rub(249999), "", "pay_1"),
			planChange, DecisionAmountMismatch, hold},
		{"a subscription line for another plan, paid again: the order is paid", payment(EventPaymentConfirmed, rub(250000), "", "pay_1"),
			planChangeHeld, DecisionAlreadyApplied, []Effect{confirmed}},
		{"another payment after a refund before any payment", payment(EventPaymentConfirmed, rub(250000), "", "pay_2"), refundedFirst,
			DecisionFulfilled, fulfil},

		{"refund of the paying payment, fulfilled", payment(EventRefunded, Amount{}, "", "pay_1"), fulfilled,
			DecisionRefunded, append(refund[:3:3], RevokeLicenses{}, ReverseCredits{}, OpenItem{ReconRefundAfterFulfill})},
		{"refund of an order with external lines: their destinations told", payment(EventRefunded, rub(250000), "", "pay_1"), delivering,
			DecisionRefunded, append(refund[:3:3], RevokeLicenses{}, ReverseCredits{}, WithdrawDeliveries{}, OpenItem{ReconRefundAfterFulfill})},
		{"refund of an order on hold with external lines: nothing was requested of them", payment(EventRefunded, rub(250000), "", "pay_1"), heldExternal,
			DecisionRefunded, refund[:3:3]},
		{"refund of the paying payment, external lines pending", payment(EventRefunded, rub(250000), "", "pay_1"), fulfilling,
			DecisionRefunded, append(refund[:3:3], RevokeLicenses{}, ReverseCredits{}, OpenItem{ReconRefundAfterFulfill})},
		{"refund of the paying payment, on hold: nothing granted", payment(EventRefunded, Amount{}, "", "pay_1"), held,
			DecisionRefunded, refund},
		{"refund of the payment of a subscription line: the subscription rules told", payment(EventRefunded, Amount{}, "", "pay_1"), subscribed,
			DecisionRefunded, append(refund[:3:3], RevokeLicenses{}, ReverseCredits{}, RefundSubscriptions{}, OpenItem{ReconRefundAfterFulfill})},
		{"partial refund of the payment of a subscription line: the subscription rules told", payment(EventPartiallyRefunded, rub(50000), "", "pay_1"), subscribed,
			DecisionPartiallyRefunded, []Effect{ReverseCreditShare{Money{"RUB", 50000}, "tbank:pay_1:50000 RUB"}, RefundSubscriptions{}, OpenItem{ReconRefundAfterFulfill}}},
		{"refund of a subscription line's order on hold: no period was paid", payment(EventRefunded, Amount{}, "", "pay_1"), planChangeHeld,
			DecisionRefunded, refund},
		{"refund announced again", payment(EventRefunded, Amount{}, "", "pay_1"), refunded, DecisionAlreadyApplied, []Effect{refundAttempt}},
		{"refund of another payment", payment(EventRefunded, Amount{}, "", "pay_2"), fulfilled, DecisionOtherPaymentRefunded, []Effect{refundAttempt}},
		{"refund that names no payment", payment(EventRefunded, Amount{}, "", ""), fulfilled,
			DecisionUnidentifiedRefund, []Effect{OpenItem{ReconRefundAfterFulfill}}},
		{"refund before the confirmation arrived", payment(EventRefunded, Amount{}, "", "pay_1"), pending,
			DecisionRefundedBeforePayment, []Effect{refundAttempt}},
		{"that refund announced again", payment(EventRefunded, Amount{}, "", "pay_1"), refundedFirst, DecisionAlreadyApplied, nil},
		{"refund for a cancelled order", payment(EventRefunded, Amount{}, "", "pay_1"), cancelled, DecisionRefundedBeforePayment, []Effect{refundAttempt}},
		{"partial refund of the paying payment", payment(EventPartiallyRefunded, rub(50000), "", "pay_1"), fulfilled,
			DecisionPartiallyRefunded, []Effect{ReverseCreditShare{Money{"RUB", 50000}, "tbank:pay_1:50000 RUB"}, OpenItem{ReconRefundAfterFulfill}}},
		{"partial refund of all of it", payment(EventPartiallyRefunded, rub(250000), "", "pay_1"), fulfilled,
			DecisionPartiallyRefunded, []Effect{ReverseCreditShare{Money{"RUB", 250000}, "tbank:pay_1:250000 RUB"}, OpenItem{ReconRefundAfterFulfill}}},
		{"partial refund of more than the total", payment(EventPartiallyRefunded, rub(250001), "", "pay_1"), fulfilled,
			DecisionRefundNotApplicable, []Effect{OpenItem{ReconRefundNotApplicable}}},
		{"partial refund of more than is left after the partial refunds recorded", payment(EventPartiallyRefunded, rub(200001), "", "pay_1"),
			partlyRefunded, DecisionRefundNotApplicable, []Effect{OpenItem{ReconRefundNotApplicable}}},
		{"partial refund of what is left after the partial refunds recorded", payment(EventPartiallyRefunded, rub(200000), "", "pay_1"),
			partlyRefunded, DecisionPartiallyRefunded, []Effect{ReverseCreditShare{Money{"RUB", 200000}, "tbank:pay_1:200000 RUB"}, OpenItem{ReconRefundAfterFulfill}}},
		{"partial refund after the full refund", payment(EventPartiallyRefunded, rub(50000), "", "pay_1"), refunded,
			DecisionRefundNotApplicable, []Effect{OpenItem{ReconRefundNotApplicable}}},
		{"partial refund after a full refund before any payment", payment(EventPartiallyRefunded, rub(50000), "", "pay_1"), refundedFirst,
			DecisionRefundNotApplicable, []Effect{OpenItem{ReconRefundNotApplicable}}},
		// Before the payment is confirmed, what it paid is not known (it
		// may have paid more than the total): the refund is recorded, and
		// the confirmation takes its share back.
		{"partial refund of more than the total before any payment", payment(EventPartiallyRefunded, rub(250001), "", "pay_1"), pending,
			DecisionPartiallyRefunded, []Effect{OpenItem{ReconRefundAfterFulfill}}},
		{"partial refund in another unit", payment(EventPartiallyRefunded, TokenAmount(decimal.RequireFromString("5"), "USDT", "TRON"), "", "pay_1"), fulfilled,
			DecisionPartiallyRefunded, []Effect{OpenItem{ReconRefundAfterFulfill}}},
		{"partial refund of another payment", payment(EventPartiallyRefunded, rub(50000), "", "pay_2"), fulfilled, DecisionOtherPaymentRefunded, nil},
		{"partial refund that names no payment: nothing taken back", payment(EventPartiallyRefunded, rub(50000), "", ""), fulfilled,
			DecisionUnidentifiedRefund, []Effect{OpenItem{ReconRefundAfterFulfill}}},
		{"partial refund of an order paid by a payment that named none: nothing taken back", payment(EventPartiallyRefunded, rub(50000), "inv_1", "pay_9"), paidByInvoice,
			DecisionUnidentifiedRefund, []Effect{OpenItem{ReconRefundAfterFulfill}}},
		{"partial refund before any payment", payment(EventPartiallyRefunded, rub(50000), "", "pay_1"), pending,
			DecisionPartiallyRefunded, []Effect{OpenItem{ReconRefundAfterFulfill}}},
		{"refund for no order", payment(EventRefunded, Amount{}, "", "pay_1"), nil, DecisionUnmatched, nil},
	}
	// A partial refund that applies is recorded first, as a fact of its own.
	for i, tc := range cases {
		if tc.decision == DecisionPartiallyRefunded {
			recorded := RecordRefund{RecordedRefund{Attempt: AttemptKey{ProviderTBank, "pay_1"}, Ref: RefundRef(tc.ev), Amount: tc.ev.Payment.Amount}}
			cases[i].effects = append([]Effect{recorded}, tc.effects...)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Decide(tc.ev, tc.order)
			if got.Decision != tc.decision || !reflect.DeepEqual(got.Effects, tc.effects) {
				t.Errorf("Decide = %s %+v (%s)\nwant     %s %+v", got.Decision, got.Effects, got.Reason, tc.decision, tc.effects)
			}
			if got.Reason == "" {
				t.Error("no reason given")
			}
			checkInvariants(t, tc.ev, tc.order, got)
			if InboxStateFor(got.Decision) == "" {
				t.Errorf("no inbox state for %s", got.Decision)
			}
		})
	}
}

// Apply keeps a locked order as the events of a batch leave it: the second
// event of an order is decided against the first one's effects.
func TestApplyFollowsEffects(t *testing.T) {
	t.Parallel()
	o := &PaidOrder{State: StatePendingPayment, Total: Money{Currency: "RUB", MinorUnits: 100}}
	pay := ProviderEvent{Provider: ProviderTBank, Environment: EnvLive, Kind: EventPaymentConfirmed,
		Payment: PaymentInfo{AttemptRef: "pay_1", PaymentID: "pay_1", MerchantOrderID: "m", Amount: MinorAmount(100, "RUB")}}
	refund := pay
	refund.Kind, refund.Payment.Amount = EventRefunded, Amount{}
	for i, want := range []Decision{DecisionFulfilled, DecisionAlreadyApplied, DecisionRefunded, DecisionAlreadyApplied, DecisionAlreadyApplied} {
		ev := pay
		if i >= 2 && i <= 3 {
			ev = refund
		}
		out := Decide(ev, o)
		if out.Decision != want {
			t.Fatalf("event %d: %s, want %s (%s)", i, out.Decision, want, out.Reason)
		}
		o.Apply(ev, out)
	}
	if o.State != StateRefunded || !o.Paid || o.Attempts[AttemptKey{ProviderTBank, "pay_1"}] != AttemptRefunded {
		t.Errorf("order after the batch: %+v", o)
	}
}

func TestItemKey(t *testing.T) {
	t.Parallel()
	s := ItemSubject{Provider: ProviderTBank, OrgID: "org_a", Environment: EnvLive, OrderID: "o1",
		AttemptRef: "pay_1", PaymentID: "pay_1", EventID: "evt_1", InboxID: 42}
	other := s
	other.EventID, other.InboxID = "evt_2", 43
	cases := []struct {
		kind      ReconKind
		sameAsEv2 bool // the same key for another event about the same thing
	}{
		{ReconExtraPayment, true},
		{ReconUnidentifiedPayment, true},
		{ReconRefundAfterFulfill, false},
		{ReconFailedEvent, false},
		{ReconRefundNotApplicable, true}, // the same refund (Refund), announced twice
	}
	s.Refund, other.Refund = "tbank:pay_1:5000 RUB", "tbank:pay_1:5000 RUB"
	for _, tc := range cases {
		if got := ItemKey(tc.kind, s) == ItemKey(tc.kind, other); got != tc.sameAsEv2 {
			t.Errorf("%s: same key for two events = %v, want %v", tc.kind, got, tc.sameAsEv2)
		}
	}
	if ItemKey(ReconFailedEvent, s) != "inbox|42" || ItemKey(ReconUnidentifiedPayment, s) != "order|o1" {
		t.Errorf("keys %q %q", ItemKey(ReconFailedEvent, s), ItemKey(ReconUnidentifiedPayment, s))
	}
	// A failure after a replay is a round of its own; the first round's key
	// is the one items opened before rounds were told apart have.
	replayed := s
	replayed.Round = 2
	if got := ItemKey(ReconFailedEvent, replayed); got != "inbox|42|2" {
		t.Errorf("failed_event key after two replays: %q", got)
	}
	// So is a delivery's after a person's retry, failed or uncertain.
	message := ItemSubject{OrgID: "org_a", Environment: EnvLive, MessageID: 7}
	retried := message
	retried.Round = 1
	for _, kind := range []ReconKind{ReconFailedDelivery, ReconUncertainDelivery} {
		if first, next := ItemKey(kind, message), ItemKey(kind, retried); first != "outbox|7" || next != "outbox|7|1" {
			t.Errorf("%s keys of the first round and the one after a retry: %q, %q", kind, first, next)
		}
	}
	// A reference holding the separator cannot make two situations one
	// key; a key of references without it is the one stored before
	// references were escaped.
	split, joined := s, s
	split.AttemptRef, split.PaymentID = "inv|pay", "1"
	joined.AttemptRef, joined.PaymentID = "inv", "pay|1"
	if ItemKey(ReconExtraPayment, split) == ItemKey(ReconExtraPayment, joined) {
		t.Errorf("payments inv|pay/1 and inv/pay|1 share the key %q", ItemKey(ReconExtraPayment, split))
	}
	slashed, slashedToo := s, s
	slashed.AttemptRef, slashed.PaymentID = `a\`, "b|c"
	slashedToo.AttemptRef, slashedToo.PaymentID = `a|b\`, "c"
	if ItemKey(ReconExtraPayment, slashed) == ItemKey(ReconExtraPayment, slashedToo) {
		t.Errorf(`payments a\ / b|c and a|b\ / c share the key %q`, ItemKey(ReconExtraPayment, slashed))
	}
	if got := ItemKey(ReconExtraPayment, s); got != "tbank|org_a|live|o1|pay_1|pay_1" {
		t.Errorf("extra_payment key %q", got)
	}
	subSplit := ItemSubject{OrgID: "org_a", Environment: EnvLive, SubscriptionID: "s1", PaymentID: "p|", EventID: "e"}
	subJoined := subSplit
	subJoined.PaymentID, subJoined.EventID = "p", "|e"
	if ItemKey(ReconRefundAfterFulfill, subSplit) == ItemKey(ReconRefundAfterFulfill, subJoined) {
		t.Errorf("two subscription refunds share the key %q", ItemKey(ReconRefundAfterFulfill, subSplit))
	}
	otherRefund := other
	otherRefund.Refund = "tbank:pay_1:6000 RUB"
	if ItemKey(ReconRefundNotApplicable, s) == ItemKey(ReconRefundNotApplicable, otherRefund) {
		t.Error("two refunds of different amounts share a refund_not_applicable key")
	}
	// A subscription's payment: one item per kind, whatever event announced
	// it; a refund's item per event; an event naming no payment its own.
	subPay := ItemSubject{OrgID: "org_a", Environment: EnvLive, SubscriptionID: "s1", PaymentID: "pay_7", EventID: "evt_1"}
	again := subPay
	again.EventID = "evt_2"
	if ItemKey(ReconExtraPayment, subPay) != ItemKey(ReconExtraPayment, again) {
		t.Error("one subscription payment announced twice has two extra_payment keys")
	}
	if ItemKey(ReconRefundAfterFulfill, subPay) == ItemKey(ReconRefundAfterFulfill, again) {
		t.Error("two refund events of a subscription's payment share a refund_after_fulfillment key")
	}
	noPay, noPayAgain := subPay, again
	noPay.PaymentID, noPayAgain.PaymentID = "", ""
	if ItemKey(ReconExtraPayment, noPay) == ItemKey(ReconExtraPayment, noPayAgain) {
		t.Error("two events of a subscription naming no payment share a key")
	}
	// A failing sweep: one item per access end, the next period's end its own.
	sweep := ItemSubject{OrgID: "org_a", Environment: EnvLive, SubscriptionID: "s1", Periods: 3}
	later := sweep
	later.Periods = 4
	if k := ItemKey(ReconSweepFailing, sweep); k != "sweep|s1|3" || k == ItemKey(ReconSweepFailing, later) {
		t.Errorf("sweep_failing keys %q and %q (4 periods)", k, ItemKey(ReconSweepFailing, later))
	}
	noRefs := s
	noRefs.AttemptRef, noRefs.PaymentID = "", ""
	if ItemKey(ReconExtraPayment, noRefs) == ItemKey(ReconExtraPayment, ItemSubject{OrderID: "o1", EventID: "evt_2"}) {
		t.Error("two events naming no payment share a key")
	}
}

// Refunds and payments of one attempt, in sequence: money that arrives is
// never silently ignored, and a refund of another payment leaves the
// paying one alone.
func TestRefundSequences(t *testing.T) {
	t.Parallel()
	type step struct {
		kind    EventKind
		invoice string
		payment string
		want    Decision
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"a refund of another payment of the paying invoice", []step{
			{EventPaymentConfirmed, "inv_1", "pay_1", DecisionFulfilled},
			{EventRefunded, "inv_1", "pay_2", DecisionOtherPaymentRefunded},
			{EventPaymentConfirmed, "inv_1", "pay_3", DecisionDuplicatePayment},
		}},
		{"a new payment of a refunded invoice", []step{
			{EventPaymentConfirmed, "inv_1", "pay_1", DecisionFulfilled},
			{EventRefunded, "inv_1", "pay_1", DecisionRefunded},
			{EventPaymentConfirmed, "inv_1", "pay_2", DecisionDuplicatePayment},
			{EventPaymentConfirmed, "inv_1", "pay_1", DecisionAlreadyApplied},
		}},
		{"an invoice refunded before any confirmation", []step{
			{EventRefunded, "inv_1", "", DecisionRefundedBeforePayment},
			{EventPaymentConfirmed, "inv_1", "pay_1", DecisionUnidentifiedPayment},
			{EventPaymentConfirmed, "inv_2", "pay_2", DecisionFulfilled},
		}},
		{"a partial refund after the full refund cannot apply", []step{
			{EventPaymentConfirmed, "", "pay_1", DecisionFulfilled},
			{EventRefunded, "", "pay_1", DecisionRefunded},
			{EventPartiallyRefunded, "", "pay_1", DecisionRefundNotApplicable},
			{EventPartiallyRefunded, "", "pay_1", DecisionRefundNotApplicable}, // nothing recorded: decided the same again
		}},
		{"a payment refunded before its confirmation", []step{
			{EventRefunded, "", "pay_1", DecisionRefundedBeforePayment},
			{EventPaymentConfirmed, "", "pay_1", DecisionStaleIgnored},
			{EventRefunded, "", "pay_1", DecisionAlreadyApplied},
		}},
		// The bank returned pay_1 before its confirmation came, and before
		// or after another payment paid the order: nothing is owed for it,
		// and no item asks a person to refund it (again).
		{"a payment refunded before its confirmation, confirmed after another paid", []step{
			{EventRefunded, "", "pay_1", DecisionRefundedBeforePayment},
			{EventPaymentConfirmed, "", "pay_2", DecisionFulfilled},
			{EventPaymentConfirmed, "", "pay_1", DecisionStaleIgnored},
			{EventPaymentConfirmed, "", "pay_3", DecisionDuplicatePayment},
		}},
		// One payment announced under its invoice once and under its own
		// id alone another time: its refund and its confirmation name two
		// attempts, and the refund still stops the confirmation.
		{"refunded under its invoice, confirmed under its own id", []step{
			{EventRefunded, "inv_1", "pay_1", DecisionRefundedBeforePayment},
			{EventPaymentConfirmed, "", "pay_1", DecisionStaleIgnored},
			{EventPaymentConfirmed, "", "pay_2", DecisionFulfilled},
		}},
		{"refunded under its own id, confirmed under its invoice", []step{
			{EventRefunded, "", "pay_1", DecisionRefundedBeforePayment},
			{EventPaymentConfirmed, "inv_1", "pay_1", DecisionStaleIgnored},
		}},
		{"refunded and confirmed under its invoice", []step{
			{EventRefunded, "inv_1", "pay_1", DecisionRefundedBeforePayment},
			{EventPaymentConfirmed, "inv_1", "pay_1", DecisionStaleIgnored},
			// Another payment of the refunded invoice: which one went back
			// is known, but the invoice's attempt is refunded, and a
			// person decides (as before).
			{EventPaymentConfirmed, "inv_1", "pay_2", DecisionUnidentifiedPayment},
		}},
		{"refunded under its invoice, confirmed under its own id after another paid", []step{
			{EventRefunded, "inv_1", "pay_1", DecisionRefundedBeforePayment},
			{EventPaymentConfirmed, "inv_2", "pay_2", DecisionFulfilled},
			{EventPaymentConfirmed, "", "pay_1", DecisionStaleIgnored},
		}},
		// The refund of a payment that did not pay the order, under its
		// invoice, then its confirmation under its own id: nothing owed.
		{"another payment refunded under its invoice after the order was paid", []step{
			{EventPaymentConfirmed, "inv_2", "pay_2", DecisionFulfilled},
			{EventRefunded, "inv_1", "pay_1", DecisionOtherPaymentRefunded},
			{EventPaymentConfirmed, "", "pay_1", DecisionStaleIgnored},
		}},
		{"refunded under its invoice, then refunded again by its id", []step{
			{EventRefunded, "inv_1", "pay_1", DecisionRefundedBeforePayment},
			{EventRefunded, "", "pay_1", DecisionAlreadyApplied},
			{EventPaymentConfirmed, "inv_1", "pay_1", DecisionStaleIgnored},
		}},
		// A partial refund of a payment refunded in full under its
		// invoice, naming the payment alone: nothing is left to refund.
		{"partial refund of a payment refunded in full under its invoice", []step{
			{EventRefunded, "inv_1", "pay_1", DecisionRefundedBeforePayment},
			{EventPartiallyRefunded, "", "pay_1", DecisionRefundNotApplicable},
		}},
		// Another payment of the invoice that paid the order, refunded in
		// full: the paying attempt stays confirmed, and the refunded
		// payment's confirmation, under either name, is owed nothing.
		{"another payment of the paying invoice refunded, then confirmed", []step{
			{EventPaymentConfirmed, "inv_1", "pay_1", DecisionFulfilled},
			{EventRefunded, "inv_1", "pay_2", DecisionOtherPaymentRefunded},
			{EventPaymentConfirmed, "", "pay_2", DecisionStaleIgnored},
			{EventPaymentConfirmed, "inv_1", "pay_2", DecisionStaleIgnored},
			{EventPaymentConfirmed, "inv_1", "pay_3", DecisionDuplicatePayment},
		}},
		// A refund that names no payment cannot be matched by its id: the
		// payment's confirmation by its id alone is of another attempt.
		{"refunded under its invoice naming no payment, confirmed by its id", []step{
			{EventRefunded, "inv_1", "", DecisionRefundedBeforePayment},
			{EventPaymentConfirmed, "", "pay_1", DecisionFulfilled},
		}},
		// Two payments of one invoice refunded before either confirmation:
		// each is known refunded.
		{"two payments of an invoice refunded", []step{
			{EventRefunded, "inv_1", "pay_1", DecisionRefundedBeforePayment},
			{EventRefunded, "inv_1", "pay_2", DecisionRefundedBeforePayment},
			{EventRefunded, "inv_1", "pay_2", DecisionAlreadyApplied},
			{EventRefunded, "inv_1", "", DecisionAlreadyApplied},
			{EventPaymentConfirmed, "", "pay_2", DecisionStaleIgnored},
			{EventPaymentConfirmed, "", "pay_1", DecisionStaleIgnored},
			{EventPaymentConfirmed, "", "pay_3", DecisionFulfilled},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := &PaidOrder{State: StatePendingPayment, Total: Money{Currency: "RUB", MinorUnits: 100}}
			for i, s := range tc.steps {
				p := PaymentInfo{InvoiceID: s.invoice, PaymentID: s.payment, MerchantOrderID: "m"}
				switch s.kind {
				case EventPaymentConfirmed:
					p.Amount = MinorAmount(100, "RUB")
				case EventPartiallyRefunded:
					p.Amount = MinorAmount(10, "RUB")
				default:
				}
				p.AttemptRef = p.Attempt()
				ev := ProviderEvent{Provider: ProviderTBank, Environment: EnvLive, Kind: s.kind, Payment: p}
				out := Decide(ev, o)
				if out.Decision != s.want {
					t.Fatalf("step %d (%s %s/%s): %s, want %s (%s)", i, s.kind, s.invoice, s.payment, out.Decision, s.want, out.Reason)
				}
				checkInvariants(t, ev, o, out)
				o.Apply(ev, out)
			}
		})
	}
}

// A partial refund names its payment under the invoice, and the payment's
// confirmation and later refunds name it by its id alone (or the other way
// round): the confirmation takes the refund's share back, the same refund
// announced under the other name is one, and what is left to refund counts
// it.
func TestPartialRefundsOfAPaymentByEitherName(t *testing.T) {
	t.Parallel()
	type step struct {
		kind             EventKind
		invoice, payment string
		minor            int64
		want             Decision
		shares           int64 // the credit shares its effects take back
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"refunded under its invoice, confirmed and refunded by its id", []step{
			{EventPartiallyRefunded, "inv_1", "pay_1", 10, DecisionPartiallyRefunded, 0},
			{EventPaymentConfirmed, "", "pay_1", 100, DecisionFulfilled, 10},
			{EventPartiallyRefunded, "", "pay_1", 10, DecisionAlreadyApplied, 0},
			{EventPartiallyRefunded, "", "pay_1", 95, DecisionRefundNotApplicable, 0}, // 90 left
			{EventPartiallyRefunded, "", "pay_1", 20, DecisionPartiallyRefunded, 20},
		}},
		{"refunded by its id, confirmed under its invoice", []step{
			{EventPartiallyRefunded, "", "pay_1", 10, DecisionPartiallyRefunded, 0},
			{EventPaymentConfirmed, "inv_1", "pay_1", 100, DecisionFulfilled, 10},
			{EventPartiallyRefunded, "inv_1", "pay_1", 10, DecisionAlreadyApplied, 0},
		}},
		{"a refund of another payment is not this one's", []step{
			{EventPartiallyRefunded, "", "pay_2", 10, DecisionPartiallyRefunded, 0},
			{EventPaymentConfirmed, "inv_1", "pay_1", 100, DecisionFulfilled, 0},
		}},
		{"refunded in full under its invoice, then in part by its id", []step{
			{EventPaymentConfirmed, "", "pay_2", 100, DecisionFulfilled, 0},
			{EventRefunded, "inv_1", "pay_1", 0, DecisionOtherPaymentRefunded, 0},
			{EventPartiallyRefunded, "", "pay_1", 10, DecisionOtherPaymentRefunded, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := &PaidOrder{State: StatePendingPayment, Total: Money{Currency: "RUB", MinorUnits: 100}}
			for i, s := range tc.steps {
				p := PaymentInfo{InvoiceID: s.invoice, PaymentID: s.payment, MerchantOrderID: "m", Amount: MinorAmount(s.minor, "RUB")}
				p.AttemptRef = p.Attempt()
				ev := ProviderEvent{Provider: ProviderTBank, Environment: EnvLive, Kind: s.kind, Payment: p}
				out := Decide(ev, o)
				var shares int64
				for _, e := range out.Effects {
					if r, ok := e.(ReverseCreditShare); ok {
						shares += r.Refunded.MinorUnits
					}
				}
				if out.Decision != s.want || shares != s.shares {
					t.Fatalf("step %d (%s %s/%s %d): %s, shares %d; want %s, %d (%s)",
						i, s.kind, s.invoice, s.payment, s.minor, out.Decision, shares, s.want, s.shares, out.Reason)
				}
				checkInvariants(t, ev, o, out)
				o.Apply(ev, out)
			}
		})
	}
}

// A fulfilling order is fulfilled, and says so, when its last external
// line is delivered; nothing else moves.
func TestDecideDelivered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state       State
		undelivered int
		want        []Effect
	}{
		{StateFulfilling, 0, []Effect{MoveOrder{StateFulfilled}, Publish{TopicOrderFulfilled}}},
		{StateFulfilling, 1, nil},
		{StateRefunded, 0, nil},
		{StateOnHold, 0, nil},
		{StateFulfilled, 0, nil},
	} {
		if got := DecideDelivered(tc.state, tc.undelivered); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("DecideDelivered(%s, %d) = %v, want %v", tc.state, tc.undelivered, got, tc.want)
		}
	}
}

// Keys name what a message is about, and nothing else.
func TestDeliveryKeys(t *testing.T) {
	t.Parallel()
	const order = "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b"
	if got := LineKey(order, 3); got != "order_019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b_line_3_fulfill" {
		t.Errorf("LineKey = %s", got)
	}
	if got := EventKey(order, TopicOrderRefunded); got != "order_019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b_order.refunded" {
		t.Errorf("EventKey = %s", got)
	}
}

// A partial refund processed before its payment's confirmation (its
// delivery came first) takes its share when the confirmation credits; one of
// another payment does not.
func TestPartialRefundBeforeConfirmation(t *testing.T) {
	t.Parallel()
	event := func(id string, kind EventKind, minor int64, pay string) ProviderEvent {
		p := PaymentInfo{PaymentID: pay, MerchantOrderID: "m-1", Amount: MinorAmount(minor, "RUB")}
		p.AttemptRef = p.Attempt()
		return ProviderEvent{Provider: ProviderTBank, Environment: EnvLive, EventID: id, Kind: kind, Type: string(kind), Payment: p}
	}
	order := &PaidOrder{State: StatePendingPayment, Total: Money{Currency: "RUB", MinorUnits: 20000}}
	for _, ev := range []ProviderEvent{
		event("r1", EventPartiallyRefunded, 5000, "pay_1"),
		event("r2", EventPartiallyRefunded, 3000, "pay_2"), // another payment
		event("r3", EventPartiallyRefunded, 1000, "pay_1"),
	} {
		out := Decide(ev, order)
		if out.Decision != DecisionPartiallyRefunded || slices.ContainsFunc(out.Effects, func(e Effect) bool { _, ok := e.(ReverseCreditShare); return ok }) {
			t.Fatalf("%s before payment: %v %v, want partially_refunded reversing nothing", ev.EventID, out.Decision, out.Effects)
		}
		order.Apply(ev, out)
	}
	out := Decide(event("c", EventPaymentConfirmed, 20000, "pay_1"), order)
	var shares []ReverseCreditShare
	for _, e := range out.Effects {
		if s, ok := e.(ReverseCreditShare); ok {
			shares = append(shares, s)
		}
	}
	want := []ReverseCreditShare{{Money{"RUB", 5000}, "tbank:pay_1:5000 RUB"}, {Money{"RUB", 1000}, "tbank:pay_1:1000 RUB"}}
	if out.Decision != DecisionFulfilled || !slices.Equal(shares, want) {
		t.Errorf("confirmation = %v, shares %v; want fulfilled taking back %v", out.Decision, shares, want)
	}
	// The refunds' items asked what to revoke when nothing was granted
	// yet: the confirmation, which grants the licenses in full, asks again.
	if !slices.Contains(out.Effects, Effect(OpenItem{ReconRefundAfterFulfill})) || !strings.Contains(out.Reason, "5000 RUB minor units, 1000 RUB minor units") {
		t.Errorf("confirmation after partial refunds: %v (%s); want a refund_after_fulfillment item and the refunds named", out.Effects, out.Reason)
	}
	if out := Decide(event("c", EventPaymentConfirmed, 20000, "pay_1"), &PaidOrder{State: StatePendingPayment, Total: order.Total}); slices.Contains(out.Effects, Effect(OpenItem{ReconRefundAfterFulfill})) {
		t.Errorf("confirmation with no refund recorded opens %v", out.Effects)
	}
}

// A payment larger than the order's total paid the order in full and
// more: its partial refunds return the excess first (what the overpayment
// item asks a person to refund), and only what they return of the price
// takes a share of the credits back; what is left to refund is what the
// payment paid, not the total. So also when the refunds were processed
// before the overpaying confirmation.
func TestPartialRefundsOfAnOverpayment(t *testing.T) {
	t.Parallel()
	event := func(kind EventKind, minor int64) ProviderEvent {
		p := PaymentInfo{PaymentID: "pay_1", CheckoutSessionID: "cs_1", Amount: MinorAmount(minor, "RUB")}
		p.AttemptRef = p.Attempt()
		return ProviderEvent{Provider: ProviderTBank, Environment: EnvLive, EventID: fmt.Sprintf("%s:%d", kind, minor),
			Kind: kind, Type: string(kind), Payment: p}
	}
	confirm, refund := EventPaymentConfirmed, EventPartiallyRefunded
	type step struct {
		kind  EventKind
		minor int64
		want  Decision
		share int64 // the credits' share taken back, of the order's total
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"the excess refunded: nothing taken back", []step{
			{confirm, 1200, DecisionFulfilled, 0}, {refund, 200, DecisionPartiallyRefunded, 0}}},
		{"more than the excess: the price's part taken back", []step{
			{confirm, 1200, DecisionFulfilled, 0}, {refund, 300, DecisionPartiallyRefunded, 100},
			{refund, 500, DecisionPartiallyRefunded, 500}}},
		{"the whole payment in parts: the whole price taken back, no more", []step{
			{confirm, 1200, DecisionFulfilled, 0}, {refund, 100, DecisionPartiallyRefunded, 0},
			{refund, 1100, DecisionPartiallyRefunded, 1000}, {refund, 1, DecisionRefundNotApplicable, 0}}},
		{"more than the payment: not applicable", []step{
			{confirm, 1200, DecisionFulfilled, 0}, {refund, 1201, DecisionRefundNotApplicable, 0}}},
		{"refunded before the confirmation: the excess first", []step{
			{refund, 150, DecisionPartiallyRefunded, 0}, {refund, 250, DecisionPartiallyRefunded, 0},
			{confirm, 1200, DecisionFulfilled, 200}}},
		{"no overpayment: shares of the total, as ever", []step{
			{confirm, 1000, DecisionFulfilled, 0}, {refund, 200, DecisionPartiallyRefunded, 200},
			{refund, 801, DecisionRefundNotApplicable, 0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			order := &PaidOrder{State: StatePendingPayment, Total: Money{Currency: "RUB", MinorUnits: 1000}}
			for i, s := range tc.steps {
				ev := event(s.kind, s.minor)
				out := Decide(ev, order)
				var share int64
				for _, e := range out.Effects {
					if r, ok := e.(ReverseCreditShare); ok {
						share += r.Refunded.MinorUnits
					}
				}
				if out.Decision != s.want || share != s.share {
					t.Fatalf("step %d (%s %d): %s taking back %d, want %s taking back %d (%s)",
						i, s.kind, s.minor, out.Decision, share, s.want, s.share, out.Reason)
				}
				checkInvariants(t, ev, order, out)
				order.Apply(ev, out)
			}
		})
	}
}

// One partial refund announced twice under different event ids (a
// notification, with its amount, and a status poll's answer, without) is
// one refund: its share is taken once, one item.
func TestPartialRefundAnnouncedTwice(t *testing.T) {
	t.Parallel()
	event := func(id string, kind EventKind, minor int64) ProviderEvent {
		p := PaymentInfo{PaymentID: "pay_1", MerchantOrderID: "m-1"}
		if minor > 0 {
			p.Amount = MinorAmount(minor, "RUB")
		}
		p.AttemptRef = p.Attempt()
		return ProviderEvent{Provider: ProviderTBank, Environment: EnvLive, EventID: id, Kind: kind, Type: string(kind), Payment: p}
	}
	for _, confirmedFirst := range []bool{true, false} {
		order := &PaidOrder{State: StatePendingPayment, Total: Money{Currency: "RUB", MinorUnits: 20000}}
		events := []ProviderEvent{
			event("T:pay_1:PARTIAL_REFUNDED:5000", EventPartiallyRefunded, 5000),
			event("poll:T:pay_1:PARTIAL_REFUNDED:20000", EventPartiallyRefunded, 0),
		}
		confirm := event("T:pay_1:CONFIRMED", EventPaymentConfirmed, 20000)
		if confirmedFirst {
			events = append([]ProviderEvent{confirm}, events...)
		} else {
			events = append(events, confirm)
		}
		var shares, items, confirmationItems int
		for _, ev := range events {
			out := Decide(ev, order)
			for _, e := range out.Effects {
				switch e.(type) {
				case ReverseCreditShare:
					shares++
				case OpenItem:
					if ev.Kind == EventPaymentConfirmed {
						confirmationItems++
					} else {
						items++
					}
				}
			}
			order.Apply(ev, out)
		}
		if shares != 1 || items != 1 {
			t.Errorf("confirmed first %v: %d shares taken, %d items of the refund; want 1 and 1", confirmedFirst, shares, items)
		}
		// A confirmation after the refund grants the licenses in full, and
		// asks what to revoke (TestPartialRefundBeforeConfirmation).
		if want := map[bool]int{true: 0, false: 1}[confirmedFirst]; confirmationItems != want {
			t.Errorf("confirmed first %v: the confirmation opened %d items, want %d", confirmedFirst, confirmationItems, want)
		}
	}
}

// A status poll's answer that a payment is partly refunded gives no
// amount: nothing is recorded or taken back, and an item asks a person to
// look the refunds up — also before the order is paid, when the
// confirmation that comes later takes no share for it.
func TestPartialRefundOfUnknownAmount(t *testing.T) {
	t.Parallel()
	p := PaymentInfo{PaymentID: "pay_1", MerchantOrderID: "m-1"}
	p.AttemptRef = p.Attempt()
	polled := ProviderEvent{Provider: ProviderTBank, EndpointID: "tbank-live", OrgID: "org_a", Environment: EnvLive, EventID: "poll:T:pay_1:PARTIAL_REFUNDED:20000",
		Kind: EventPartiallyRefunded, Type: "PARTIAL_REFUNDED", Payment: p}
	if err := polled.Validate(); err != nil {
		t.Fatalf("a partial refund without its amount: %v", err)
	}
	for _, state := range []State{StatePendingPayment, StateFulfilled} {
		order := &PaidOrder{State: state, Total: Money{Currency: "RUB", MinorUnits: 20000}}
		out := Decide(polled, order)
		want := []Effect{OpenItem{ReconRefundNotApplicable}}
		if out.Decision != DecisionRefundNotApplicable || !slices.Equal(out.Effects, want) {
			t.Errorf("%s: %s %v, want refund_not_applicable and its item alone", state, out.Decision, out.Effects)
		}
		order.Apply(polled, out)
		confirm := polled
		confirm.EventID, confirm.Kind, confirm.Payment.Amount = "T:pay_1:CONFIRMED", EventPaymentConfirmed, MinorAmount(20000, "RUB")
		for _, e := range Decide(confirm, order).Effects {
			if _, ok := e.(ReverseCreditShare); ok {
				t.Errorf("%s: the confirmation takes back a share of a refund of unknown amount", state)
			}
		}
	}
}

// A payment that paid the first period of the order's subscription before
// the order was created (PeriodPaidBefore, set by the batch): it pays the
// order as any payment when it fits it, its PaySubscriptions finding the
// period paid already; when it does not (the price, the plan), the order
// stays unpaid and an item opens, and its refund then is the period's;
// refunded before the order came, it pays nothing; and its refund while
// the order is unpaid has the subscription rules take the period back. A
// payment that stays a subscription's (PeriodOfAnother) is neither the
// order's payment nor an extra one.
func TestDecidePeriodPaidBeforeTheOrder(t *testing.T) {
	t.Parallel()
	settlement := &Settlement{Token: "USDT", Network: "TRON", Amount: decimal.RequireFromString("25")}
	order := func(r *Renewal, attempt AttemptState) *PaidOrder {
		o := &PaidOrder{State: StatePendingPayment, Settlement: settlement, HasSubscriptionLines: true, PeriodPaidBefore: r,
			Attempts: map[AttemptKey]AttemptState{}}
		if attempt != "" {
			o.Attempts[AttemptKey{ProviderYolfi, "inv_1"}] = attempt
		}
		if attempt == AttemptRefunded { // by pay_1's refund
			o.FullyRefunded = map[PaymentKey]bool{{ProviderYolfi, "pay_1"}: true}
		}
		return o
	}
	paid := &Renewal{Period: 1, PaymentID: "pay_1"}
	refunded := &Renewal{Period: 1, PaymentID: "pay_1", Refunded: true}
	withAttempt := func(o *PaidOrder, a AttemptState) *PaidOrder {
		c := *o
		c.Attempts = map[AttemptKey]AttemptState{{ProviderYolfi, "inv_1"}: a}
		return &c
	}
	dearer := order(paid, "")
	dearer.Settlement = &Settlement{Token: "USDT", Network: "TRON", Amount: decimal.RequireFromString("30")}
	otherPlan := order(paid, "")
	otherPlan.PlanChange = &PlanChange{From: "pro-monthly", To: "pro-yearly"}
	// another is an order the payment did not pay, the payment having paid
	// period 2 of a subscription; paid, by another payment.
	another := func(paidByOther bool) *PaidOrder {
		o := order(nil, "")
		o.PeriodOfAnother = &Renewal{Period: 2, PaymentID: "pay_1"}
		if paidByOther {
			o.State, o.Paid, o.PaidBy = StateFulfilled, true, PaidRefs{AttemptRef: "inv_0", InvoiceID: "inv_0", PaymentID: "pay_0"}
		}
		return o
	}
	event := func(k EventKind) ProviderEvent {
		return ProviderEvent{Provider: ProviderYolfi, Environment: EnvLive, Kind: k, Type: string(k),
			Payment: PaymentInfo{AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1", MerchantOrderID: "m-1",
				SubscriptionID: "sub_1", Amount: TokenAmount(decimal.RequireFromString("25"), "USDT", "TRON")}}
	}
	fulfilled := []Effect{RecordAttempt{AttemptConfirmed}, MarkPaid{}, MoveOrder{StateFulfilled}, Publish{TopicOrderFulfilled},
		GrantLicenses{}, CreditBalances{}, PaySubscriptions{}}
	cases := []struct {
		name   string
		ev     ProviderEvent
		order  *PaidOrder
		want   Decision
		effect []Effect
		reason string
	}{
		{"the payment, its period paid: the order paid and fulfilled, the period found paid", event(EventPaymentConfirmed),
			order(paid, ""), DecisionFulfilled, fulfilled, "paid period 1 of the subscription before the order was created"},
		{"the payment, no period paid before: as any payment", event(EventPaymentConfirmed),
			order(nil, ""), DecisionFulfilled, fulfilled, "confirmed payment"},
		{"the payment, its period refunded: nothing granted, the attempt refunded", event(EventPaymentConfirmed),
			order(refunded, ""), DecisionStaleIgnored, []Effect{RecordAttempt{AttemptRefunded}, RecordFullRefund{}}, "and was refunded"},
		{"the payment, its period refunded by the order's refund first: the same", event(EventPaymentConfirmed),
			order(refunded, AttemptRefunded), DecisionStaleIgnored, []Effect{RecordAttempt{AttemptRefunded}}, "and was refunded"},
		{"its refund, the order unpaid: the subscription rules take the period back", event(EventRefunded),
			order(paid, ""), DecisionRefundedBeforePayment, []Effect{RecordAttempt{AttemptRefunded}, RecordFullRefund{}, RefundSubscriptions{}},
			"the subscription's rules decide"},
		{"its refund again: recorded already", event(EventRefunded),
			order(paid, AttemptRefunded), DecisionAlreadyApplied, nil, "already recorded"},
		{"its refund again, the attempt refunded before refunds named their payment: the payment recorded now",
			event(EventRefunded), withAttempt(order(paid, ""), AttemptRefunded), DecisionRefundedBeforePayment,
			[]Effect{RecordAttempt{AttemptRefunded}, RecordFullRefund{}, RefundSubscriptions{}}, "the subscription's rules decide"},
		{"a refund, no period paid before: the order's alone", event(EventRefunded),
			order(nil, ""), DecisionRefundedBeforePayment, []Effect{RecordAttempt{AttemptRefunded}, RecordFullRefund{}}, "nothing was granted"},
		{"the payment, its period paid, short of the order's price: the order unpaid, an item", event(EventPaymentConfirmed),
			dearer, DecisionAmountMismatch, []Effect{RecordAttempt{AttemptConfirmed}, OpenItem{ReconAmountMismatch}},
			"the order stays unpaid, the period paid"},
		{"the payment, its period paid, for another plan than the order's: the order unpaid, an item",
			event(EventPaymentConfirmed), otherPlan, DecisionPlanChangeRefused,
			[]Effect{RecordAttempt{AttemptConfirmed}, OpenItem{ReconPlanChange}}, "the order stays unpaid, the period paid"},
		{"then its refund: the subscription rules take the period back", event(EventRefunded),
			withAttempt(dearer, AttemptConfirmed), DecisionRefundedBeforePayment,
			[]Effect{RecordAttempt{AttemptRefunded}, RecordFullRefund{}, RefundSubscriptions{}}, "the subscription's rules decide"},
		{"a payment of another subscription's period: the order takes nothing", event(EventPaymentConfirmed),
			another(false), DecisionAlreadyApplied, nil, "it stays the subscription's"},
		{"the same, the order paid by another payment: no extra payment", event(EventPaymentConfirmed),
			another(true), DecisionAlreadyApplied, nil, "it stays the subscription's"},
		{"its refund, the order unpaid: the order's attempt refunded, the period the subscription's", event(EventRefunded),
			another(false), DecisionRefundedBeforePayment, []Effect{RecordAttempt{AttemptRefunded}, RecordFullRefund{}}, "whose rules decide"},
		{"its refund, the order paid by another payment: the period the subscription's", event(EventRefunded),
			another(true), DecisionOtherPaymentRefunded, []Effect{RecordAttempt{AttemptRefunded}, RecordFullRefund{}}, "whose rules decide"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Decide(tc.ev, tc.order)
			if got.Decision != tc.want || !reflect.DeepEqual(got.Effects, tc.effect) || !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("Decide =\n %+v\nwant %s, %+v, a reason saying %q", got, tc.want, tc.effect, tc.reason)
			}
			checkInvariants(t, tc.ev, tc.order, got)
		})
	}
}

// An event no order matches says what it named its order by, for the person
// looking for that order; one that names none says so.
func TestUnmatchedSaysWhatItLookedFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		merchant, session, want string
	}{
		{"late-1", "", `no order matches merchant_order_id "late-1" (yet)`},
		{"late-1", "cs_1", `no order matches merchant_order_id "late-1" or checkout_session_id "cs_1" (yet)`},
		{"", "cs_1", `no order matches checkout_session_id "cs_1" (yet)`},
		{"", "", "the event names no order (no merchant order id, no checkout session)"},
	} {
		ev := ProviderEvent{Provider: ProviderYolfi, OrgID: "org_a", Environment: EnvLive, Kind: EventPaymentConfirmed,
			Payment: PaymentInfo{MerchantOrderID: tc.merchant, CheckoutSessionID: tc.session, InvoiceID: "inv_1", AttemptRef: "inv_1",
				Amount: TokenAmount(decimal.RequireFromString("25"), "USDT", "TRON")}}
		out := Decide(ev, nil)
		if out.Decision != DecisionUnmatched || out.Reason != tc.want || !slices.Contains(out.Effects, Effect(OpenItem{ReconUnmatchedPayment})) {
			t.Errorf("%q/%q: %s %q %v; want unmatched %q with an unmatched_payment item", tc.merchant, tc.session, out.Decision, out.Reason, out.Effects, tc.want)
		}
	}
}
