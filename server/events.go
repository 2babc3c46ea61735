package server

import (
	"context"
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
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	p := principalFrom(ctx)
	if err := requireOrg(p, ev.OrgID); err != nil {
		return nil, err
	}
	if err := s.checkEndpoint(ev, p); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	receipt, err := s.record(ctx, ev, req.GetRawBody())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &fulfillmentv1.RecordEventResponse{Duplicate: receipt.Duplicate, State: string(receipt.State)}, nil
}

// record stores a checked event of a configured endpoint.
func (s *Service) record(ctx context.Context, ev fulfillment.ProviderEvent, rawBody []byte) (fulfillment.InboxReceipt, error) {
	ev.OccurredAt = fulfillment.PlausibleOccurrence(ev.OccurredAt, time.Now())
	return s.inbox.InboxInsert(ctx, ev, rawBody)
}

// checkEndpoint refuses an event for an endpoint this service is not
// configured with, or whose provider, org or environment differ from that
// endpoint's: RecordEvent cannot file an event under another tenant,
// environment or provider than the endpoint that verified it. The event
// itself may be sound — the gateway's configuration and this service's
// disagree — so the answer is FAILED_PRECONDITION, which a gateway reports
// as its own failure (500) rather than as a refused event (400): the
// provider keeps retrying while someone mends the configuration. An
// endpoint of an org that caller (nil: any) may not act for answers as one
// that is not configured: a token limited to one org learns nothing of
// another org's endpoints.
func (s *Service) checkEndpoint(ev fulfillment.ProviderEvent, caller *Principal) error {
	ep, ok := s.endpoints[ev.EndpointID]
	if !ok || caller != nil && !caller.AllowsOrg(ep.OrgID) {
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
