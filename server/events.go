package server

import (
	"context"
	"fmt"

	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// RecordEvent implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) RecordEvent(ctx context.Context, req *fulfillmentv1.RecordEventRequest) (*fulfillmentv1.RecordEventResponse, error) {
	ev, err := eventFromProto(req)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if err := requireOrg(principalFrom(ctx), ev.OrgID); err != nil {
		return nil, err
	}
	receipt, err := s.inbox.InboxInsert(ctx, ev, req.GetRawBody())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &fulfillmentv1.RecordEventResponse{Duplicate: receipt.Duplicate, State: string(receipt.State)}, nil
}

// Bounds of a recorded event, checked again here: the gateway is a separate
// process and a database row must never hold what an adapter let through.
const maxRawBody = 1 << 20

// eventFromProto reads and validates a RecordEventRequest.
func eventFromProto(req *fulfillmentv1.RecordEventRequest) (fulfillment.ProviderEvent, error) {
	p := req.GetPayment()
	ev := fulfillment.ProviderEvent{
		Provider:    fulfillment.Provider(req.GetProvider()),
		EndpointID:  req.GetEndpointId(),
		OrgID:       req.GetOrgId(),
		Environment: fulfillment.Environment(req.GetEnvironment()),
		EventID:     req.GetEventId(),
		Type:        req.GetType(),
		Kind:        fulfillment.EventKind(req.GetKind()),
		TestMode:    req.GetTestMode(),
		Payment: fulfillment.PaymentInfo{
			AttemptRef:        p.GetAttemptRef(),
			PaymentID:         p.GetPaymentId(),
			InvoiceID:         p.GetInvoiceId(),
			CheckoutSessionID: p.GetCheckoutSessionId(),
			MerchantOrderID:   p.GetMerchantOrderId(),
			PaylinkID:         p.GetPaylinkId(),
			SubscriptionID:    p.GetSubscriptionId(),
			Token:             p.GetToken(),
			Network:           p.GetNetwork(),
			TxHash:            p.GetTxHash(),
		},
	}
	if req.GetOccurTime() != nil {
		ev.OccurredAt = req.GetOccurTime().AsTime()
	}
	var vs []fulfillment.FieldViolation
	bad := func(field, format string, args ...any) {
		vs = append(vs, fulfillment.FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
	}
	if ev.Provider != fulfillment.ProviderYolfi && ev.Provider != fulfillment.ProviderTBank {
		bad("provider", "must be %q or %q", fulfillment.ProviderYolfi, fulfillment.ProviderTBank)
	}
	for field, v := range map[string]string{"endpoint_id": ev.EndpointID, "org_id": ev.OrgID, "event_id": ev.EventID, "type": ev.Type} {
		if v == "" || len(v) > fulfillment.MaxIDLen {
			bad(field, "is required, at most %d bytes", fulfillment.MaxIDLen)
		}
	}
	if !ev.Environment.Valid() {
		bad("environment", "must be %q or %q", fulfillment.EnvLive, fulfillment.EnvTest)
	}
	switch ev.Kind {
	case fulfillment.EventAttemptCreated, fulfillment.EventPaymentConfirmed, fulfillment.EventAttemptExpired,
		fulfillment.EventAttemptCancelled, fulfillment.EventOther:
	default:
		bad("kind", "must be a known event kind such as %q", fulfillment.EventPaymentConfirmed)
	}
	if a := p.GetAmount(); a != "" {
		d, err := decimal.NewFromString(a)
		if err != nil || d.IsNegative() || d.Exponent() < -fulfillment.MaxDecimalFrac {
			bad("payment.amount", "must be a non-negative decimal string with at most %d decimals", fulfillment.MaxDecimalFrac)
		}
		ev.Payment.Amount, ev.Payment.HasAmount = d, true
	}
	if len(req.GetRawBody()) == 0 || len(req.GetRawBody()) > maxRawBody {
		bad("raw_body", "is required, at most %d bytes", maxRawBody)
	}
	if len(vs) > 0 {
		return ev, &fulfillment.ValidationError{Violations: vs}
	}
	return ev, nil
}
