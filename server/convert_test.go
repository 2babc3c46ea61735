package server

import (
	"reflect"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// A gateway's event reaches the service as it left: eventFromProto undoes
// eventToProto, field for field.
func TestEventProtoRoundTrip(t *testing.T) {
	t.Parallel()
	for _, want := range []fulfillment.ProviderEvent{
		{
			Provider: fulfillment.ProviderYolfi, EndpointID: "yolfi-live", OrgID: "org_a", Environment: fulfillment.EnvLive,
			EventID: "evt_1", Type: "payment.confirmed", Kind: fulfillment.EventPaymentConfirmed, TestMode: true,
			OccurredAt: time.Date(2026, 11, 29, 10, 15, 30, 0, time.UTC),
			Payment: fulfillment.PaymentInfo{AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1",
				CheckoutSessionID: "cs_1", MerchantOrderID: "m-1", SubscriptionID: "sub_1",
				Amount: fulfillment.TokenAmount(decimal.RequireFromString("25.5"), "USDT", "TRON")},
			Refs: map[string]string{"tx_hash": "0xabc"},
		},
		{
			Provider: fulfillment.ProviderTBank, EndpointID: "tbank", OrgID: "org_a", Environment: fulfillment.EnvTest,
			EventID: "T:1:REFUNDED", Type: "REFUNDED", Kind: fulfillment.EventRefunded,
			Payment: fulfillment.PaymentInfo{AttemptRef: "1", PaymentID: "1", Amount: fulfillment.MinorAmount(250000, "RUB")},
		},
	} {
		got, err := eventFromProto(eventToProto(want, []byte(`{}`)))
		if err != nil {
			t.Fatalf("%s: %v", want.EventID, err)
		}
		if !got.Payment.Amount.Value.Equal(want.Payment.Amount.Value) {
			t.Errorf("%s: amount %s, want %s", want.EventID, got.Payment.Amount, want.Payment.Amount)
		}
		got.Payment.Amount.Value, want.Payment.Amount.Value = decimal.Zero, decimal.Zero
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}
}

// A gateway older than refs sends a paylink and a transaction hash in their
// own fields: they land in the event's refs.
func TestOlderGatewayRefs(t *testing.T) {
	t.Parallel()
	req := eventToProto(fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderYolfi, EndpointID: "yolfi-live", OrgID: "org_a", Environment: fulfillment.EnvLive,
		EventID: "evt_1", Type: "invoice.created", Kind: fulfillment.EventAttemptCreated,
		Payment: fulfillment.PaymentInfo{AttemptRef: "inv_1", InvoiceID: "inv_1"},
		Refs:    map[string]string{"paylink_id": "pl_1", "tx_hash": "0xabc"},
	}, []byte(`{}`))
	req.Refs = nil // as an older gateway sends it
	ev, err := eventFromProto(req)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"paylink_id": "pl_1", "tx_hash": "0xabc"}; !reflect.DeepEqual(ev.Refs, want) {
		t.Errorf("refs = %v, want %v", ev.Refs, want)
	}
}
