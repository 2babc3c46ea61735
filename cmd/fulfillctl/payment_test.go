package main

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

// orders start-payment starts a payment at the fake bank and prints the
// attempt; running it again prints the same attempt, and the bank has one
// payment.
func TestStartPayment(t *testing.T) {
	t.Parallel()
	bank, err := fakebank.New(fakebank.Options{TerminalKey: "CtlTerminalDEMO", Password: []byte("ctl-password")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bank.Close() })
	s := startServiceWith(t, func(c *config.Config) {
		var opts yaml.Node
		if err := opts.Encode(map[string]string{"terminal_key": "CtlTerminalDEMO", "api_url": bank.URL()}); err != nil {
			t.Fatal(err)
		}
		c.Endpoints = append(c.Endpoints, config.Endpoint{ID: "tbank-live", Provider: "tbank", Org: svcOrg,
			Environment: "live", Secrets: []config.Secret{{Value: []byte("ctl-password")}}, Options: opts})
	})
	resp, err := s.client.CreateOrder(admin(t), &fulfillmentv1.CreateOrderRequest{
		OrgId: svcOrg, Environment: "live", MerchantOrderId: "rub-1",
		Lines: []*fulfillmentv1.OrderLine{{Sku: "pro", Kind: "license", Quantity: 1,
			UnitPrice: &fulfillmentv1.Money{Currency: "RUB", MinorUnits: 19900}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetOrder().GetId()

	first := fromJSON(t, s.ctlOK(t, "orders", "start-payment", id, "--endpoint", "tbank-live", "--description", "Pro", "--json"), &fulfillmentv1.PaymentStart{})
	if first.GetState() != "started" || !strings.HasPrefix(first.GetPaymentUrl(), bank.URL()) || first.GetAmount().GetMinorUnits() != 19900 {
		t.Fatalf("start-payment printed %v", first)
	}
	again := fromJSON(t, s.ctlOK(t, "orders", "start-payment", id, "--endpoint", "tbank-live", "-o", "json"), &fulfillmentv1.PaymentStart{})
	if again.GetPaymentId() != first.GetPaymentId() || len(bank.Payments()) != 1 {
		t.Errorf("again: payment %s (first %s), the bank has %d payments; want the same, one", again.GetPaymentId(), first.GetPaymentId(), len(bank.Payments()))
	}
	_, _, err = s.ctl(t, "orders", "start-payment", id, "--endpoint", "nowhere")
	wantAPIError(t, err, codes.InvalidArgument, `INVALID_ARGUMENT: endpoint_id: "nowhere" is not a configured endpoint`)
	_, _, err = s.ctl(t, "orders", "start-payment", id, "--endpoint", "yolfi-live")
	wantAPIError(t, err, codes.FailedPrecondition, "FAILED_PRECONDITION: endpoint \"yolfi-live\" (yolfi) does not take payments")
	if _, _, err := s.ctl(t, "orders", "start-payment", id); err == nil || !strings.Contains(err.Error(), "endpoint") {
		t.Errorf("without --endpoint: %v, want it asked for", err)
	}
}
