package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// RecordEvent implements fulfillmentv1.FulfillmentServiceServer. Its caller
// may be a gateway in another process, so nothing it sends is trusted: every
// field is checked with the rules the adapters apply, and the event must
// belong to an endpoint of this service's configuration, as that endpoint
// is configured.
func (s *Service) RecordEvent(ctx context.Context, req *fulfillmentv1.RecordEventRequest) (*fulfillmentv1.RecordEventResponse, error) {
	ev, err := eventFromProto(req)
	if err == nil {
		err = s.checkEndpoint(ev)
	}
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if err := requireOrg(principalFrom(ctx), ev.OrgID); err != nil {
		return nil, err
	}
	ev.OccurredAt = fulfillment.PlausibleOccurrence(ev.OccurredAt, time.Now())
	receipt, err := s.inbox.InboxInsert(ctx, ev, req.GetRawBody())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &fulfillmentv1.RecordEventResponse{Duplicate: receipt.Duplicate, State: string(receipt.State)}, nil
}

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
			SubscriptionID:    p.GetSubscriptionId(),
		},
		Refs: req.GetRefs(),
	}
	if req.GetOccurTime() != nil {
		ev.OccurredAt = req.GetOccurTime().AsTime()
	}
	var vs []fulfillment.FieldViolation
	if a := p.GetAmount(); a != nil {
		var err error
		if ev.Payment.Amount, err = amountFromProto(a); err != nil {
			vs = append(vs, fulfillment.FieldViolation{Field: "payment.amount.value", Description: "must be a decimal string such as \"25.000000\": " + err.Error()})
		}
	}
	if n := len(req.GetRawBody()); n == 0 || n > fulfillment.MaxRawBodyBytes {
		vs = append(vs, fulfillment.FieldViolation{Field: "raw_body", Description: fmt.Sprintf("is required, at most %d bytes", fulfillment.MaxRawBodyBytes)})
	}
	var ve *fulfillment.ValidationError
	if errors.As(ev.Validate(), &ve) {
		vs = append(ve.Violations, vs...)
	}
	if len(vs) > 0 {
		return ev, &fulfillment.ValidationError{Violations: vs}
	}
	return ev, nil
}

// checkEndpoint refuses an event for an endpoint this service is not
// configured with, or whose provider, org or environment differ from that
// endpoint's: RecordEvent cannot file an event under another tenant,
// environment or provider than the endpoint that verified it. The event
// itself may be sound — the gateway's configuration and this service's
// disagree — so the answer is FAILED_PRECONDITION, which a gateway reports
// as its own failure (500) rather than as a refused event (400): the
// provider keeps retrying while someone mends the configuration.
func (s *Service) checkEndpoint(ev fulfillment.ProviderEvent) error {
	ep, ok := s.endpoints[ev.EndpointID]
	if !ok {
		return status.Errorf(codes.FailedPrecondition,
			"endpoint_id: %q is not a webhook endpoint of this service's configuration (endpoints[].id)", ev.EndpointID)
	}
	for _, f := range []struct{ field, got, want string }{
		{"provider", string(ev.Provider), string(ep.Provider)},
		{"org_id", ev.OrgID, ep.OrgID},
		{"environment", string(ev.Environment), string(ep.Environment)},
	} {
		if f.got != f.want {
			return status.Errorf(codes.FailedPrecondition,
				"%s: endpoint %q is configured with %s %q in this service", f.field, ep.ID, f.field, f.want)
		}
	}
	return nil
}
