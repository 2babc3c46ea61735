package server

import (
	"context"
	"strconv"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// rawBodyScope is the scope whose holders see events' raw bodies. It is
// checked on the caller, not the method: a token that reads events
// through another scope later would not see them.
const rawBodyScope = config.ScopeAdmin

// Raw body statuses of an InboxEvent.
const (
	rawBodyIncluded = "included"
	rawBodyPurged   = "purged"
	rawBodyWithheld = "withheld"
)

// ListInboxEvents implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) ListInboxEvents(ctx context.Context, req *fulfillmentv1.ListInboxEventsRequest) (*fulfillmentv1.ListInboxEventsResponse, error) {
	p := principalFrom(ctx)
	filter := fulfillment.EventFilter{
		VisibleOrgs: p.VisibleOrgs(),
		OrgID:       req.GetOrgId(),
		Environment: fulfillment.Environment(req.GetEnvironment()),
		State:       fulfillment.InboxState(req.GetState()),
		Decision:    fulfillment.Decision(req.GetDecision()),
		Type:        req.GetType(),
		EndpointID:  req.GetEndpointId(),
		OrderID:     req.GetOrderId(),
		Provider:    fulfillment.Provider(req.GetProvider()),
	}
	var afterErr, beforeErr error
	filter.ReceivedAfter, afterErr = filterTime("received_after", req.GetReceivedAfter())
	filter.ReceivedBefore, beforeErr = filterTime("received_before", req.GetReceivedBefore())
	pg, err := s.listing(ctx, p, joinViolations(filter.Validate(), afterErr, beforeErr), filter.OrgID, req,
		filter.OrgID, string(filter.State), string(filter.Decision), filter.Type, filter.EndpointID, filter.OrderID,
		filter.VisibleOrgs, string(filter.Provider), filter.ReceivedAfter.UnixNano(), filter.ReceivedBefore.UnixNano(),
		string(filter.Environment))
	if err != nil {
		return nil, err
	}
	fetch := func(before int64, limit int) ([]fulfillment.StoredEvent, error) {
		return s.events.EventList(ctx, fulfillment.EventListParams{Filter: filter, BeforeID: before, Limit: limit})
	}
	resp := &fulfillmentv1.ListInboxEventsResponse{}
	resp.Events, resp.NextPageToken, err = fillIDPage(pg, fetch,
		func(e fulfillment.StoredEvent) *fulfillmentv1.InboxEvent { return inboxEventToProto(e, "") },
		func(e fulfillment.StoredEvent) int64 { return e.ID })
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return resp, nil
}

// GetInboxEvent implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) GetInboxEvent(ctx context.Context, req *fulfillmentv1.GetInboxEventRequest) (*fulfillmentv1.GetInboxEventResponse, error) {
	n, err := fulfillment.ParseInboxEventID("inbox_event_id", req.GetInboxEventId())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	p := principalFrom(ctx)
	withBody := p.HasScope(rawBodyScope)
	e, err := s.events.EventGet(ctx, n, withBody)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if err := requireVisible(p, e.Event.OrgID, fulfillment.NotFoundID("stored event", n)); err != nil {
		return nil, err
	}
	body := rawBodyWithheld
	switch {
	case e.RawBodyPurged:
		body = rawBodyPurged
	case withBody:
		body = rawBodyIncluded
	}
	return &fulfillmentv1.GetInboxEventResponse{Event: inboxEventToProto(e, body)}, nil
}

// ReplayInboxEvent implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) ReplayInboxEvent(ctx context.Context, req *fulfillmentv1.ReplayInboxEventRequest) (*fulfillmentv1.ReplayInboxEventResponse, error) {
	n, err := fulfillment.ParseInboxEventID("inbox_event_id", req.GetInboxEventId())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	p := principalFrom(ctx)
	r := fulfillment.EventReplayRequest{ID: n, Actor: p.Name, ActorDetail: req.GetActorDetail()}
	if err := r.Validate(); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	// The org is checked before anything changes.
	e, err := s.events.EventGet(ctx, n, false)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if err := requireVisible(p, e.Event.OrgID, fulfillment.NotFoundID("stored event", n)); err != nil {
		return nil, err
	}
	if e, err = s.events.EventReplay(ctx, r); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	s.log.InfoContext(ctx, "inbox event replayed", "inbox_event_id", e.ID, "replays", e.ReplayCount)
	return &fulfillmentv1.ReplayInboxEventResponse{Event: inboxEventToProto(e, "")}, nil
}

// inboxEventToProto renders a stored event; its raw body only with
// bodyStatus "included" (listings and evidence pass "").
func inboxEventToProto(e fulfillment.StoredEvent, bodyStatus string) *fulfillmentv1.InboxEvent {
	ev := e.Event
	rec := eventToProto(ev, nil)
	pb := &fulfillmentv1.InboxEvent{
		Id:             strconv.FormatInt(e.ID, 10),
		Provider:       string(ev.Provider),
		EndpointId:     ev.EndpointID,
		OrgId:          ev.OrgID,
		Environment:    string(ev.Environment),
		EventId:        ev.EventID,
		Type:           ev.Type,
		Kind:           string(ev.Kind),
		TestMode:       ev.TestMode,
		OccurTime:      rec.GetOccurTime(),
		ReceiveTime:    timestamppb.New(e.ReceivedAt),
		Payment:        rec.GetPayment(),
		Refs:           ev.Refs,
		State:          string(e.State),
		Decision:       string(e.Decision),
		DecisionReason: e.Reason,
		OrderId:        e.OrderID,
		SubscriptionId: e.SubscriptionID,
		Attempts:       int32(e.Attempts),
		LastError:      e.LastError,
		RawBodyStatus:  bodyStatus,
		ReplayCount:    int32(e.ReplayCount),
	}
	if bodyStatus == rawBodyIncluded {
		pb.RawBody = e.RawBody
	}
	if e.NextAttemptAt != nil {
		pb.NextAttemptTime = timestamppb.New(*e.NextAttemptAt)
	}
	if e.ProcessedAt != nil {
		pb.ProcessTime = timestamppb.New(*e.ProcessedAt)
	}
	for _, r := range e.Replays {
		pb.Replays = append(pb.Replays, &fulfillmentv1.EventReplay{
			ReplayedBy: r.By, ReplayedByDetail: r.ByDetail, ReplayTime: timestamppb.New(r.At),
			PreviousState: string(r.PreviousState), PreviousDecision: string(r.PreviousDecision),
			PreviousReason: r.PreviousReason, PreviousAttempts: int32(r.PreviousAttempts),
			PreviousLastError: r.PreviousLastError,
		})
	}
	return pb
}
