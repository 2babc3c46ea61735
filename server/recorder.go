package server

import (
	"context"
	"fmt"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// EventRecorder hands verified events to a FulfillmentService over gRPC: the
// webhook gateway's way into the inbox, in-process or remote.
type EventRecorder struct {
	client fulfillmentv1.FulfillmentServiceClient
	token  string
}

// NewEventRecorder returns a recorder calling conn with a bearer token that
// holds the ingest scope.
func NewEventRecorder(conn grpc.ClientConnInterface, token string) *EventRecorder {
	return &EventRecorder{client: fulfillmentv1.NewFulfillmentServiceClient(conn), token: token}
}

// RecordEvent stores ev and returns once it is committed. Errors wrap
// fulfillment.ErrUnavailable when the service or its database cannot take
// the event now (UNAVAILABLE, DEADLINE_EXCEEDED: the provider must retry),
// or are a *fulfillment.ValidationError when the event itself is refused
// (INVALID_ARGUMENT). Other codes — this gateway's token refused, an
// internal error — are plain errors.
func (r *EventRecorder) RecordEvent(ctx context.Context, ev fulfillment.ProviderEvent, rawBody []byte) (fulfillment.InboxReceipt, error) {
	req := eventToProto(ev, rawBody)
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+r.token)
	resp, err := r.client.RecordEvent(ctx, req)
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.InvalidArgument:
			ve := &fulfillment.ValidationError{}
			for _, d := range st.Details() {
				if br, ok := d.(*errdetails.BadRequest); ok {
					for _, v := range br.GetFieldViolations() {
						ve.Violations = append(ve.Violations, fulfillment.FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
					}
				}
			}
			if len(ve.Violations) == 0 {
				ve.Violations = []fulfillment.FieldViolation{{Description: st.Message()}}
			}
			return fulfillment.InboxReceipt{}, ve
		case codes.Unavailable, codes.DeadlineExceeded:
			return fulfillment.InboxReceipt{}, fmt.Errorf("%w: recording event: %s: %s", fulfillment.ErrUnavailable, st.Code(), st.Message())
		default:
			return fulfillment.InboxReceipt{}, fmt.Errorf("recording event: %s: %s", st.Code(), st.Message())
		}
	}
	return fulfillment.InboxReceipt{Duplicate: resp.GetDuplicate(), State: fulfillment.InboxState(resp.GetState())}, nil
}

// LocalRecorder records events in the service's own process: the webhook
// gateway of `fulfillmentd serve` calls RecordEvent's checks and insert
// directly — no message encoding, no gRPC hop, no token (its only caller
// is this process). A gateway in another process uses EventRecorder.
type LocalRecorder struct {
	svc    *Service
	tracer trace.Tracer
}

// LocalRecorder returns the in-process recorder of s.
func (s *Server) LocalRecorder() *LocalRecorder {
	tp := s.opts.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &LocalRecorder{svc: s.svc, tracer: tp.Tracer("github.com/fulfillplatform/fulfillment/server")}
}

// RecordEvent stores ev and returns once it is committed, with the errors
// of EventRecorder.RecordEvent: a *fulfillment.ValidationError for an event
// refused, fulfillment.ErrUnavailable for one that cannot be stored now,
// and a plain error when this service's endpoints disagree with it. Its
// span, named after the gRPC method, is the parent of the event's
// processing span.
func (r *LocalRecorder) RecordEvent(ctx context.Context, ev fulfillment.ProviderEvent, rawBody []byte) (fulfillment.InboxReceipt, error) {
	ctx, span := r.tracer.Start(ctx, fulfillmentv1.FulfillmentService_RecordEvent_FullMethodName)
	defer span.End()
	err := checkRecorded(ev, rawBody)
	if err == nil {
		err = r.svc.checkEndpoint(ev, nil)
	}
	var receipt fulfillment.InboxReceipt
	if err == nil {
		receipt, err = r.svc.record(ctx, ev, rawBody)
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, "not recorded")
		return fulfillment.InboxReceipt{}, err
	}
	return receipt, nil
}
