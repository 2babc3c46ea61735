package server

import (
	"context"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// ListOutboxMessages implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) ListOutboxMessages(ctx context.Context, req *fulfillmentv1.ListOutboxMessagesRequest) (*fulfillmentv1.ListOutboxMessagesResponse, error) {
	p := principalFrom(ctx)
	filter := fulfillment.DeliveryFilter{
		VisibleOrgs:   p.VisibleOrgs(),
		OrgID:         req.GetOrgId(),
		Environment:   fulfillment.Environment(req.GetEnvironment()),
		State:         fulfillment.DeliveryState(req.GetState()),
		DestinationID: req.GetDestinationId(),
		OrderID:       req.GetOrderId(),
	}
	pg, err := s.listing(ctx, p, filter.Validate(), filter.OrgID, req,
		filter.OrgID, string(filter.State), filter.DestinationID, filter.OrderID, filter.VisibleOrgs, string(filter.Environment))
	if err != nil {
		return nil, err
	}
	fetch := func(before int64, limit int) ([]fulfillment.Delivery, error) {
		return s.outbox.DeliveryList(ctx, fulfillment.DeliveryListParams{Filter: filter, BeforeID: before, Limit: limit})
	}
	resp := &fulfillmentv1.ListOutboxMessagesResponse{}
	resp.Messages, resp.NextPageToken, err = fillIDPage(pg, fetch, deliveryToProto, func(d fulfillment.Delivery) int64 { return d.ID })
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return resp, nil
}

// GetOutboxMessage implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) GetOutboxMessage(ctx context.Context, req *fulfillmentv1.GetOutboxMessageRequest) (*fulfillmentv1.GetOutboxMessageResponse, error) {
	d, err := s.visibleDelivery(ctx, req.GetMessageId())
	if err != nil {
		return nil, err
	}
	return &fulfillmentv1.GetOutboxMessageResponse{Message: deliveryToProto(d)}, nil
}

// RetryOutboxMessage implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) RetryOutboxMessage(ctx context.Context, req *fulfillmentv1.RetryOutboxMessageRequest) (*fulfillmentv1.RetryOutboxMessageResponse, error) {
	d, err := s.visibleDelivery(ctx, req.GetMessageId())
	if err != nil {
		return nil, err
	}
	if _, ok := config.FindDestination(s.cfg.Destinations, d.DestinationID); !ok {
		return nil, status.Errorf(codes.FailedPrecondition,
			"message %d is for destination %q, which is not configured: configure it first", d.ID, d.DestinationID)
	}
	d, err = s.outbox.DeliveryRetry(ctx, d.ID, principalFrom(ctx).Name, req.GetResend())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	s.log.InfoContext(ctx, "outbox message retried by hand", "message_id", d.ID, "destination", d.DestinationID, "resend", req.GetResend())
	return &fulfillmentv1.RetryOutboxMessageResponse{Message: deliveryToProto(d)}, nil
}

// ConfirmOutboxDelivery implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) ConfirmOutboxDelivery(ctx context.Context, req *fulfillmentv1.ConfirmOutboxDeliveryRequest) (*fulfillmentv1.ConfirmOutboxDeliveryResponse, error) {
	c := fulfillment.DeliveryConfirmation{Note: req.GetNote(), Actor: principalFrom(ctx).Name, ActorDetail: req.GetActorDetail()}
	if err := c.Validate(); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	d, err := s.visibleDelivery(ctx, req.GetMessageId())
	if err != nil {
		return nil, err
	}
	c.MessageID = d.ID
	if d, err = s.outbox.DeliveryConfirm(ctx, c); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	s.log.InfoContext(ctx, "outbox message confirmed delivered by hand", "message_id", d.ID, "destination", d.DestinationID)
	return &fulfillmentv1.ConfirmOutboxDeliveryResponse{Message: deliveryToProto(d)}, nil
}

// visibleDelivery reads the message named by id, when the caller may see
// its org.
func (s *Service) visibleDelivery(ctx context.Context, id string) (fulfillment.Delivery, error) {
	n, err := fulfillment.ParseMessageID("message_id", id)
	if err != nil {
		return fulfillment.Delivery{}, toStatus(ctx, s.log, err)
	}
	d, err := s.outbox.DeliveryGet(ctx, n)
	if err != nil {
		return d, toStatus(ctx, s.log, err)
	}
	if err := requireVisible(principalFrom(ctx), d.OrgID, fulfillment.NotFoundID("outbox message", n)); err != nil {
		return d, err
	}
	return d, nil
}

// ListDestinations implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) ListDestinations(ctx context.Context, _ *fulfillmentv1.ListDestinationsRequest) (*fulfillmentv1.ListDestinationsResponse, error) {
	// Destinations are every org's; their messages are counted for the
	// orgs the caller may see.
	statuses, err := s.outbox.DestinationStatuses(ctx, principalFrom(ctx).VisibleOrgs())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	resp := &fulfillmentv1.ListDestinationsResponse{}
	for _, d := range s.cfg.Destinations {
		resp.Destinations = append(resp.Destinations, destinationToProto(d, statuses[d.ID]))
	}
	return resp, nil
}

// requireEveryOrg fails with PERMISSION_DENIED unless the caller may act for
// every org: destinations are shared by all of them, so turning one off or
// on is not an org's to do.
func requireEveryOrg(p *Principal, what string) error {
	if p.VisibleOrgs() == nil {
		return nil
	}
	return status.Errorf(codes.PermissionDenied,
		"token %q is limited to orgs %v: %s affects every org, and takes an admin token for every org (orgs: [\"*\"])", p.Name, p.VisibleOrgs(), what)
}

// DisableDestination implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) DisableDestination(ctx context.Context, req *fulfillmentv1.DisableDestinationRequest) (*fulfillmentv1.DisableDestinationResponse, error) {
	if err := requireEveryOrg(principalFrom(ctx), "disabling a destination"); err != nil {
		return nil, err
	}
	d, err := s.configuredDestination(ctx, req.GetDestinationId())
	if err != nil {
		return nil, err
	}
	if err := fulfillment.ValidateNote("reason", req.GetReason()); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if err := s.outbox.DestinationDisable(ctx, d.ID, req.GetReason()+" (by "+principalFrom(ctx).Name+")"); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	s.log.InfoContext(ctx, "destination disabled by hand", "destination", d.ID)
	pb, err := s.destinationNow(ctx, d)
	if err != nil {
		return nil, err
	}
	return &fulfillmentv1.DisableDestinationResponse{Destination: pb}, nil
}

// EnableDestination implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) EnableDestination(ctx context.Context, req *fulfillmentv1.EnableDestinationRequest) (*fulfillmentv1.EnableDestinationResponse, error) {
	if err := requireEveryOrg(principalFrom(ctx), "enabling a destination"); err != nil {
		return nil, err
	}
	d, err := s.configuredDestination(ctx, req.GetDestinationId())
	if err != nil {
		return nil, err
	}
	if err := s.outbox.DestinationEnable(ctx, d.ID); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	s.log.InfoContext(ctx, "destination enabled", "destination", d.ID)
	pb, err := s.destinationNow(ctx, d)
	if err != nil {
		return nil, err
	}
	return &fulfillmentv1.EnableDestinationResponse{Destination: pb}, nil
}

// configuredDestination returns the configured destination id names.
func (s *Service) configuredDestination(ctx context.Context, id string) (config.Destination, error) {
	if err := fulfillment.ValidateDestinationID("destination_id", id); err != nil {
		return config.Destination{}, toStatus(ctx, s.log, err)
	}
	d, ok := config.FindDestination(s.cfg.Destinations, id)
	if !ok {
		return d, status.Errorf(codes.NotFound, "destination %q is not configured", id)
	}
	return d, nil
}

// destinationNow renders d with its status as stored now.
func (s *Service) destinationNow(ctx context.Context, d config.Destination) (*fulfillmentv1.Destination, error) {
	statuses, err := s.outbox.DestinationStatuses(ctx, principalFrom(ctx).VisibleOrgs())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return destinationToProto(d, statuses[d.ID]), nil
}

func destinationToProto(d config.Destination, st fulfillment.DestinationStatus) *fulfillmentv1.Destination {
	pb := &fulfillmentv1.Destination{
		Id: d.ID, Url: d.URL, Idempotent: d.Idempotent != nil && *d.Idempotent, Events: d.Events,
		Enabled: st.DisabledAt == nil, DisabledReason: st.DisabledReason,
		Pending: st.Pending, Failed: st.Failed, Uncertain: st.Uncertain,
	}
	if st.DisabledAt != nil {
		pb.DisableTime = timestamppb.New(*st.DisabledAt)
	}
	return pb
}

// deliveryToProto renders a message; payload and history when read.
func deliveryToProto(d fulfillment.Delivery) *fulfillmentv1.OutboxMessage {
	pb := &fulfillmentv1.OutboxMessage{
		Id:              strconv.FormatInt(d.ID, 10),
		DestinationId:   d.DestinationID,
		Topic:           string(d.Topic),
		IdempotencyKey:  d.Key,
		OrgId:           d.OrgID,
		Environment:     string(d.Environment),
		OrderId:         d.OrderID,
		Required:        d.Required,
		State:           string(d.State),
		Attempts:        int32(d.Attempts),
		LastStatus:      int32(d.LastStatus),
		LastError:       d.LastError,
		CreateTime:      timestamppb.New(d.CreatedAt),
		Payload:         string(d.Payload),
		OmittedAttempts: int32(d.OmittedAttempts),
	}
	if d.LineNo != nil {
		n := int32(*d.LineNo)
		pb.LineNo = &n
	}
	if d.NextAttemptAt != nil {
		pb.NextAttemptTime = timestamppb.New(*d.NextAttemptAt)
	}
	if d.ProcessedAt != nil {
		pb.ProcessTime = timestamppb.New(*d.ProcessedAt)
	}
	for _, a := range d.History {
		pb.AttemptHistory = append(pb.AttemptHistory, &fulfillmentv1.DeliveryAttempt{
			Attempt:    int32(a.Attempt),
			StartTime:  timestamppb.New(a.StartedAt),
			FinishTime: timestamppb.New(a.FinishedAt),
			Status:     int32(a.Status),
			Outcome:    string(a.Outcome),
			Reason:     a.Reason,
		})
	}
	return pb
}
