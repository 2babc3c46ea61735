package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// oneOrder is an order store holding one order.
type oneOrder struct {
	fulfillment.OrderStore
	order fulfillment.Order
}

func (s oneOrder) OrderGet(context.Context, string) (fulfillment.Order, error) { return s.order, nil }

// failingRecords is a payment store whose look-up of a known payment id
// fails as the database's would, and which keeps what a start was left with.
type failingRecords struct {
	fulfillment.PaymentStore
	failure error
	left    string
}

func (*failingRecords) StartBegin(_ context.Context, r fulfillment.StartRequest) (fulfillment.PaymentStart, bool, error) {
	return fulfillment.PaymentStart{ID: 1, OrderID: r.OrderID, EndpointID: r.EndpointID, Provider: r.Provider, Attempt: 1,
		ProviderOrderID: fulfillment.ProviderOrderID(r.OrderID, 1), State: fulfillment.StartStarting,
		Amount: fulfillment.Money{Currency: "RUB", MinorUnits: 1000}, Asks: 1}, true, nil
}

func (p *failingRecords) StartRelease(_ context.Context, _ int64, detail string) error {
	p.left = detail
	return nil
}

func (p *failingRecords) StartKnownPaymentID(context.Context, fulfillment.PaymentStart) (string, error) {
	return "", p.failure
}

// usedOrderID is a provider that refuses every start as an order id used
// before, naming no payment, under the reuse policy.
type usedOrderID struct{ fulfillment.PaymentProvider }

func (usedOrderID) CheckStart(fulfillment.ProviderStart) error { return nil }
func (usedOrderID) StartPayment(context.Context, fulfillment.ProviderStart) (fulfillment.ProviderPayment, error) {
	return fulfillment.ProviderPayment{}, &fulfillment.ProviderRefusal{Code: "8", Duplicate: true}
}
func (usedOrderID) Currency() string                                  { return "RUB" }
func (usedOrderID) DuplicatePolicy() fulfillment.DuplicateOrderPolicy { return fulfillment.PolicyReuse }

// The provider answered that the order id was used; the service's own
// records then failed while it looked for that payment. The caller is told
// the database is unavailable, not that the provider did not answer, and
// neither the answer nor the start's record holds the database's error
// text (its user, database and address, as a failed connection says them).
func TestStartPaymentOwnRecordsFailingAreNotTheProviders(t *testing.T) {
	t.Parallel()
	records := &failingRecords{failure: errors.Join(fulfillment.ErrUnavailable,
		errors.New("failed to connect to `user=fulfill_app database=fulfillment_prod`: 10.0.0.5:5432: connection refused"))}
	order := fulfillment.Order{ID: "0b3f6d0e-8f0e-4a4e-9c55-3c1f5e4b9a11", State: fulfillment.StatePendingPayment,
		OrderSpec: fulfillment.OrderSpec{OrgID: "org_a", Environment: fulfillment.EnvLive, Lines: []fulfillment.Line{
			{SKU: "pro", Kind: fulfillment.KindLicense, Quantity: 1, UnitPrice: fulfillment.Money{Currency: "RUB", MinorUnits: 1000}}}}}
	s := &Service{store: oneOrder{order: order}, payStore: records, log: slog.New(slog.DiscardHandler),
		endpoints: map[string]fulfillment.Endpoint{"tb": {ID: "tb", Provider: fulfillment.ProviderTBank, OrgID: "org_a", Environment: fulfillment.EnvLive}},
		payments:  map[string]fulfillment.PaymentProvider{"tb": usedOrderID{}}}
	ctx := context.WithValue(context.Background(), principalKey{}, &Principal{Name: "ops"})
	_, err := s.StartPayment(ctx, &fulfillmentv1.StartPaymentRequest{OrderId: order.ID, EndpointId: "tb"})
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.Unavailable || strings.Contains(msg, "provider did not answer") {
		t.Errorf("StartPayment: %v; want UNAVAILABLE for the database, not the provider's silence", err)
	}
	for what, text := range map[string]string{"the answer": msg, "the start's record": records.left} {
		if strings.Contains(text, "10.0.0.5") || strings.Contains(text, "fulfill_app") {
			t.Errorf("%s holds the database's error: %q", what, text)
		}
	}
	if records.left == "" {
		t.Error("the start was not released for the next call")
	}
}
