package server

import (
	"reflect"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
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
				CheckoutSessionID: "cs_1", MerchantOrderID: "m-1", SubscriptionID: "sub_1", CustomerRef: "user_42",
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

// A subscription line's plan reaches the domain, and comes back on the
// order's lines.
func TestOrderLinePlanProto(t *testing.T) {
	t.Parallel()
	d := orderDraftFromProto(&fulfillmentv1.CreateOrderRequest{Lines: []*fulfillmentv1.OrderLine{
		{Sku: "pro-month", Kind: "subscription", Quantity: 1, AccountRef: "user_42", PlanId: "pro-monthly"},
	}})
	if l := d.Lines[0]; l.PlanID != "pro-monthly" || l.AccountRef != "user_42" {
		t.Errorf("line draft = %+v, want the plan and the customer", l)
	}
	pb := orderToProto(fulfillment.Order{OrderSpec: fulfillment.OrderSpec{Lines: []fulfillment.Line{
		{SKU: "pro-month", Kind: fulfillment.KindSubscription, Quantity: 1, AccountRef: "user_42", PlanID: "pro-monthly"},
	}}})
	if l := pb.GetLines()[0]; l.GetPlanId() != "pro-monthly" || l.GetKind() != "subscription" || l.GetAccountRef() != "user_42" {
		t.Errorf("order line = %v, want the plan and the customer", l)
	}
}

// A subscription event in the feed names its subscription, not an order.
func TestFeedSubscriptionEvent(t *testing.T) {
	t.Parallel()
	pb := orderEventToProto(fulfillment.OrderEvent{OrgID: "org_a", Environment: fulfillment.EnvLive,
		SubscriptionID: "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b", Topic: fulfillment.TopicSubscriptionRenewed, Payload: []byte(`{}`)})
	if pb.GetSubscriptionId() != "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b" || pb.GetOrderId() != "" || pb.GetTopic() != "subscription.renewed" {
		t.Errorf("feed event = %v", pb)
	}
}
