package fulfillment

import (
	"slices"
	"testing"
	"time"
)

// The bodies render as the contract says: times in UTC (the message's with
// microseconds, a period's end with its offset), prices' minor units as
// decimal strings, a subscription's period end null before any is paid.
func TestPayloadRendering(t *testing.T) {
	t.Parallel()
	at := time.Date(2027, 1, 1, 13, 0, 0, 120000, time.FixedZone("MSK", 3*3600))
	order := OrderRef{OrderID: "o-1", OrgID: "org_a", Environment: EnvLive, MerchantOrderID: "m-1"}
	sub := &SubscriptionRecord{ID: "s-1", SubscriptionRef: SubscriptionRef{OrgID: "org_a", Environment: EnvTest,
		Provider: ProviderYolfi, ProviderSubscriptionID: "sub_1", CustomerRef: "user_1", PlanID: "pro"}}
	paid := *sub
	paid.State, paid.Periods, paid.PeriodEnd = SubActive, 2, time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		p    Payload
		want string
	}{
		{"order event", OrderEventBody(TopicOrderRefunded, order, StateRefunded, Money{"RUB", 123456789012}, at),
			`{"type":"order.refunded","timestamp":"2027-01-01T10:00:00.000120Z","data":{"order_id":"o-1","org_id":"org_a",` +
				`"environment":"live","merchant_order_id":"m-1","state":"refunded","total":{"currency":"RUB","minor_units":"123456789012"}}}`},
		{"fulfillment request", LineRequestBody(order, ExternalLine{LineNo: 2, SKU: "box", Quantity: 3,
			UnitPrice: Money{"USD", 500}, Destination: "shipping"}, at),
			`{"type":"fulfillment.requested","timestamp":"2027-01-01T10:00:00.000120Z","data":{"order_id":"o-1","org_id":"org_a",` +
				`"environment":"live","merchant_order_id":"m-1","line":{"line_no":2,"sku":"box","quantity":3,` +
				`"unit_price":{"currency":"USD","minor_units":"500"}}}}`},
		{"subscription before a period", SubscriptionEventBody(TopicSubscriptionAccessEnded, sub, at),
			`{"type":"subscription.access_ended","timestamp":"2027-01-01T10:00:00.000120Z","data":{"subscription_id":"s-1",` +
				`"org_id":"org_a","environment":"test","provider":"yolfi","provider_subscription_id":"sub_1","customer_ref":"user_1",` +
				`"plan_id":"pro","state":"","periods":0,"period_end":null}}`},
		{"subscription paid", SubscriptionEventBody(TopicSubscriptionRenewed, &paid, at),
			`{"type":"subscription.renewed","timestamp":"2027-01-01T10:00:00.000120Z","data":{"subscription_id":"s-1",` +
				`"org_id":"org_a","environment":"test","provider":"yolfi","provider_subscription_id":"sub_1","customer_ref":"user_1",` +
				`"plan_id":"pro","state":"active","periods":2,"period_end":"2027-03-01T10:00:00+00:00"}}`},
	} {
		got, err := tc.p.Render()
		if err != nil || got != tc.want {
			t.Errorf("%s:\n got %s, %v\nwant %s", tc.name, got, err, tc.want)
		}
	}
}

// TopicState undoes StateTopic: the feed renders an order event's state
// from its topic, so every announced state must come back from its topic,
// and a topic announcing no order state must name none.
func TestTopicStateUndoesStateTopic(t *testing.T) {
	t.Parallel()
	announced := 0
	for _, s := range []State{StatePendingPayment, StatePaid, StateFulfilling, StateFulfilled, StateOnHold,
		StateCancelled, StateExpired, StateRefunded} {
		topic := StateTopic(s)
		if topic == "" {
			continue
		}
		announced++
		if got := TopicState(topic); got != s {
			t.Errorf("TopicState(StateTopic(%s)) = %q", s, got)
		}
	}
	if announced != len(OrderTopics) {
		t.Errorf("%d states announced, want one per order topic (%d)", announced, len(OrderTopics))
	}
	for _, topic := range EventTopics {
		if st := TopicState(topic); (st != "") != slices.Contains(OrderTopics, topic) {
			t.Errorf("TopicState(%s) = %q", topic, st)
		}
	}
}
