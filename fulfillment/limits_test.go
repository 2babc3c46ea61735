package fulfillment

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func TestParseDecimal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want string // "" = refused
	}{
		{"25", "25"},
		{"25.000000", "25"},
		{"0.5", "0.5"},
		{strings.Repeat("9", MaxDecimalInt) + "." + strings.Repeat("9", MaxDecimalFrac), strings.Repeat("9", MaxDecimalInt) + "." + strings.Repeat("9", MaxDecimalFrac)},
		{strings.Repeat("9", MaxDecimalInt+1), ""},
		{"1." + strings.Repeat("1", MaxDecimalFrac+1), ""},
		{"1e30", ""},
		{"1E5", ""},
		{"-1", ""},
		{"+1", ""},
		{" 1", ""},
		{"1,5", ""},
		{".5", ""},
		{"5.", ""},
		{"", ""},
		{"0x10", ""},
		{"1\x00", ""},
		{"Infinity", ""},
		{"NaN", ""},
	}
	for _, tc := range cases {
		d, err := ParseDecimal(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("ParseDecimal(%q) = %s, want an error", tc.in, d)
		case tc.want != "" && (err != nil || d.String() != tc.want):
			t.Errorf("ParseDecimal(%q) = %s, %v; want %s", tc.in, d, err, tc.want)
		}
	}
}

func TestTextRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rule TextRule
		v    string
		ok   bool
	}{
		{RuleRef, "заказ 42", true},
		{RuleRef, strings.Repeat("r", MaxIDLen), true},
		{RuleRef, strings.Repeat("r", MaxIDLen+1), false},
		{RuleRef, "a\x00b", false},
		{RuleRef, "a\nb", false},
		{RuleRef, "a\u200bb", false}, // zero-width space
		{RuleRef, "a\xffb", false},
		{RuleEventID, "evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V", true},
		{RuleEventID, "evt 1", false},
		{RuleEventID, "évt", false},
		{RuleEventType, strings.Repeat("t", MaxEventTypeLen+1), false},
		{RuleToken, "USDT", true},
		{RuleToken, "US DT", false},
		{RuleNetwork, strings.Repeat("n", MaxNetworkLen+1), false},
	}
	for _, tc := range cases {
		if err := tc.rule.Check(tc.v); (err == nil) != tc.ok {
			t.Errorf("%+v.Check(%q) = %v, want ok=%v", tc.rule, tc.v, err, tc.ok)
		}
	}
}

func validEvent() ProviderEvent {
	return ProviderEvent{
		Provider: ProviderYolfi, EndpointID: "yolfi-live", OrgID: "org_a", Environment: EnvLive,
		EventID: "evt_1", Type: "payment.confirmed", Kind: EventPaymentConfirmed,
		Payment: PaymentInfo{AttemptRef: "inv_1", InvoiceID: "inv_1", MerchantOrderID: "m-1",
			Amount: TokenAmount(decimal.RequireFromString("25"), "USDT", "TRON")},
	}
}

func TestProviderEventValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(*ProviderEvent)
		field  string // "" = valid
	}{
		{"valid", func(*ProviderEvent) {}, ""},
		{"no payment at all", func(e *ProviderEvent) { e.Payment = PaymentInfo{}; e.Kind = EventOther }, ""},
		{"no provider", func(e *ProviderEvent) { e.Provider = "" }, "provider"},
		{"provider with a space", func(e *ProviderEvent) { e.Provider = "pay pal" }, "provider"},
		{"no endpoint", func(e *ProviderEvent) { e.EndpointID = "" }, "endpoint_id"},
		{"org with a space", func(e *ProviderEvent) { e.OrgID = "org a" }, "org_id"},
		{"unknown environment", func(e *ProviderEvent) { e.Environment = "prod" }, "environment"},
		{"no event id", func(e *ProviderEvent) { e.EventID = "" }, "event_id"},
		{"event id with NUL", func(e *ProviderEvent) { e.EventID = "evt\x00" }, "event_id"},
		{"long type", func(e *ProviderEvent) { e.Type = strings.Repeat("t", 65) }, "type"},
		{"unknown kind", func(e *ProviderEvent) { e.Kind = "refund" }, "kind"},
		{"NUL in merchant order id", func(e *ProviderEvent) { e.Payment.MerchantOrderID = "m\x00" }, "payment.merchant_order_id"},
		{"long reference", func(e *ProviderEvent) { e.Refs = map[string]string{"tx_hash": strings.Repeat("0", 129)} }, "refs.tx_hash"},
		{"reference name with a space", func(e *ProviderEvent) { e.Refs = map[string]string{"tx hash": "0xabc"} }, "refs"},
		{"references kept", func(e *ProviderEvent) { e.Refs = map[string]string{"tx_hash": "0xabc", "paylink_id": "pl_1"} }, ""},
		{"negative amount", func(e *ProviderEvent) { e.Payment.Amount.Value = decimal.New(-1, 0) }, "payment.amount"},
		{"amount of 31 digits", func(e *ProviderEvent) { e.Payment.Amount.Value = decimal.New(1, 30) }, "payment.amount"},
		{"amount of 19 decimals", func(e *ProviderEvent) { e.Payment.Amount.Value = decimal.New(1, -19) }, "payment.amount"},
		{"currency amount in minor units", func(e *ProviderEvent) { e.Payment.Amount = MinorAmount(250000, "RUB") }, ""},
		{"currency amount with a fraction", func(e *ProviderEvent) {
			e.Payment.Amount = Amount{Value: decimal.RequireFromString("2500.5"), Unit: CurrencyUnit("RUB")}
		}, "payment.amount"},
		{"lowercase currency", func(e *ProviderEvent) { e.Payment.Amount = MinorAmount(100, "rub") }, "payment.currency"},
		{"token and currency at once", func(e *ProviderEvent) { e.Payment.Amount.Unit.Currency = "USD" }, "payment.currency"},
		{"token without network", func(e *ProviderEvent) { e.Payment.Amount.Unit.Network = "" }, "payment.network"},
		{"an amount without a unit", func(e *ProviderEvent) { e.Kind, e.Payment.Amount.Unit = EventAttemptCreated, Unit{} }, "payment.currency"},
		{"partial refund without an amount (a status poll's)", func(e *ProviderEvent) { e.Kind, e.Payment.Amount = EventPartiallyRefunded, Amount{} }, ""},
		{"full refund without an amount", func(e *ProviderEvent) { e.Kind, e.Payment.Amount = EventRefunded, Amount{} }, ""},
		{"attempt ref of another attempt", func(e *ProviderEvent) { e.Payment.AttemptRef = "inv_9" }, "payment.attempt_ref"},
		{"no attempt ref for an invoice", func(e *ProviderEvent) { e.Payment.AttemptRef = "" }, "payment.attempt_ref"},
		{"attempt is the payment without an invoice", func(e *ProviderEvent) {
			e.Payment.InvoiceID, e.Payment.PaymentID, e.Payment.AttemptRef = "", "pay_1", "pay_1"
		}, ""},
		{"confirmed without an amount", func(e *ProviderEvent) { e.Payment.Amount = Amount{} }, "payment.amount"},
		{"confirmed naming no order or payment", func(e *ProviderEvent) {
			e.Payment.InvoiceID, e.Payment.MerchantOrderID, e.Payment.AttemptRef = "", "", ""
		}, "payment"},
		{"trailing zeros are fine", func(e *ProviderEvent) { e.Payment.Amount.Value = decimal.New(25_000_000_000_000_000, -24) }, ""},
	}
	for _, tc := range cases {
		ev := validEvent()
		tc.mutate(&ev)
		err := ev.Validate()
		var ve *ValidationError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field != "" && (!errors.As(err, &ve) || len(ve.Violations) != 1 || ve.Violations[0].Field != tc.field):
			t.Errorf("%s: %v, want one violation of %s", tc.name, err, tc.field)
		}
	}
}

func TestPlausibleOccurrence(t *testing.T) {
	t.Parallel()
	received := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name           string
		occurred, want time.Time
	}{
		{"unknown stays unknown", time.Time{}, time.Time{}},
		{"a minute ago", received.Add(-time.Minute), received.Add(-time.Minute)},
		{"an hour ahead (clock skew)", received.Add(time.Hour), received.Add(time.Hour)},
		{"exactly a day ahead", received.Add(MaxFutureSkew), received.Add(MaxFutureSkew)},
		{"more than a day ahead", received.Add(MaxFutureSkew + time.Second), received},
		{"year 2099", time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), received},
		{"1 January 2000", EarliestOccurrence, EarliestOccurrence},
		{"1999", EarliestOccurrence.Add(-time.Second), received},
		{"Unix epoch", time.Unix(0, 0), received},
	}
	for _, tc := range cases {
		if got := PlausibleOccurrence(tc.occurred, received); !got.Equal(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
