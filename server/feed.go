package server

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// Bounds of the order event feed.
const (
	// maxWatchers bounds the feed streams one process serves at once.
	maxWatchers = 256
	// feedBatch is how many events one read of the feed takes.
	feedBatch = 100
	// feedPoll: without a notification, the feed is read again after
	// this long — events of transactions that were still running at the
	// last read are sent then.
	feedPoll = time.Second
)

// errFeedStopping ends a feed stream when the server shuts down: the
// caller resumes elsewhere, or after the restart, from its cursor.
var errFeedStopping = status.Error(codes.Unavailable, "this server is shutting down: reconnect with the cursor of the last event received")

// WatchOrderEvents implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) WatchOrderEvents(req *fulfillmentv1.WatchOrderEventsRequest, stream fulfillmentv1.FulfillmentService_WatchOrderEventsServer) error {
	ctx := stream.Context()
	p := principalFrom(ctx)
	after, err := fulfillment.ParseFeedCursor("cursor", req.GetCursor())
	if err != nil {
		return toStatus(ctx, s.log, err)
	}
	params := fulfillment.FeedParams{
		After: after, VisibleOrgs: p.VisibleOrgs(), OrgID: req.GetOrgId(),
		Environment: fulfillment.Environment(req.GetEnvironment()), Limit: feedBatch,
	}
	filter := fulfillment.OrderFilter{OrgID: params.OrgID, Environment: params.Environment}
	if err := filter.Validate(); err != nil {
		return toStatus(ctx, s.log, err)
	}
	if params.OrgID != "" {
		if err := requireOrg(p, params.OrgID); err != nil {
			return err
		}
	}
	if s.watchers.Add(1) > maxWatchers {
		s.watchers.Add(-1)
		return status.Errorf(codes.ResourceExhausted, "this server already streams %d order event feeds: retry later, or on another replica", maxWatchers)
	}
	defer s.watchers.Add(-1)
	// Headers now, not with the first event: the caller knows it is
	// following the feed even while there is nothing to send.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}

	wake := make(chan struct{}, 1)
	go s.feed.FeedListen(ctx, func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	poll := time.NewTimer(feedPoll)
	defer poll.Stop()
	for {
		select {
		case <-s.stopping: // also while catching up
			return errFeedStopping
		default:
		}
		events, err := s.feed.FeedRead(ctx, params)
		if err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return toStatus(ctx, s.log, err) // the caller resumes from its cursor
		}
		for _, e := range events {
			if err := stream.Send(orderEventToProto(e)); err != nil {
				return err
			}
			params.After = e.Cursor
		}
		if len(events) == feedBatch {
			continue
		}
		poll.Reset(feedPoll)
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.stopping:
			return errFeedStopping
		case <-wake:
		case <-poll.C:
		}
	}
}

func orderEventToProto(e fulfillment.OrderEvent) *fulfillmentv1.WatchOrderEventsResponse {
	return &fulfillmentv1.WatchOrderEventsResponse{
		Cursor:         e.Cursor.String(),
		Topic:          string(e.Topic),
		OrderId:        e.OrderID,
		SubscriptionId: e.SubscriptionID,
		OrgId:          e.OrgID,
		Environment:    string(e.Environment),
		CreateTime:     timestamppb.New(e.CreatedAt),
		Payload:        string(e.Payload),
	}
}
