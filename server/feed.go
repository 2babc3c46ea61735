package server

import (
	"context"
	"errors"
	"sync"
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
	// maxWatchers bounds the feed streams one process serves at once;
	// maxWatchersPerToken, those of one token among them, so that one
	// caller (or org) cannot take them all.
	maxWatchers         = 256
	maxWatchersPerToken = 32
	// feedBatch is how many events one read of the feed takes.
	feedBatch = 100
	// feedPoll: without a notification, the feed is read again after
	// this long — events of transactions that were still running at the
	// last read are sent then.
	feedPoll = time.Second
)

// feedSlots counts the feed streams served, in all and by token
// (Principal.Name), within maxWatchers and maxWatchersPerToken.
type feedSlots struct {
	mu      sync.Mutex
	total   int
	byToken map[string]int
}

// take counts a stream of token in, or says which bound it would pass.
func (f *feedSlots) take(token string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.byToken[token] >= maxWatchersPerToken:
		return status.Errorf(codes.ResourceExhausted, "this token already follows %d order event feeds on this server: "+
			"close one (one feed per consumer carries every event it may see)", maxWatchersPerToken)
	case f.total >= maxWatchers:
		return status.Errorf(codes.ResourceExhausted, "this server already streams %d order event feeds: retry later, or on another replica", maxWatchers)
	}
	if f.byToken == nil {
		f.byToken = map[string]int{}
	}
	f.total++
	f.byToken[token]++
	return nil
}

// release counts a stream of token out.
func (f *feedSlots) release(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total--
	f.byToken[token]--
	if f.byToken[token] <= 0 {
		delete(f.byToken, token)
	}
}

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
	if err := s.feeds.take(p.Name); err != nil {
		return err
	}
	defer s.feeds.release(p.Name)
	if after != (fulfillment.FeedCursor{}) {
		// Every cursor the feed returns is at or before its tail, which
		// only moves on: one past it names no event this database has
		// (made up, or from a database restored to an earlier point), and
		// the stream would wait for it in silence. Read within the token's
		// feeds, so that no caller reads it more often than it may open
		// streams.
		tail, err := s.feed.FeedTail(ctx)
		if err != nil {
			return toStatus(ctx, s.log, err)
		}
		if tail.Before(after) {
			return status.Errorf(codes.OutOfRange, "cursor %s is past the end of the feed: no event this database holds "+
				"has it (was the database restored to an earlier point?); resume from a cursor the feed returned, or "+
				"from the start (an empty cursor)", after)
		}
	}
	// Headers now, not with the first event: the caller knows it is
	// following the feed even while there is nothing to send.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}

	send := func(e fulfillment.OrderEvent) error {
		if err := stream.Send(orderEventToProto(e)); err != nil {
			return err
		}
		params.After = e.Cursor
		return nil
	}
	for {
		// Subscribe, then catch up by reading alone until a read comes
		// back short; then follow the process's one reader (see feedHub).
		sub := s.feedHub.subscribe()
		err := s.catchUp(ctx, &params, send)
		if err == nil {
			err = s.follow(ctx, sub, &params, send)
		}
		s.feedHub.unsubscribe(sub)
		if !errors.Is(err, errFeedDropped) {
			return err
		}
	}
}

// errFeedDropped: the hub dropped the stream, which catches up by itself.
var errFeedDropped = errors.New("dropped by the feed's reader")

// catchUp reads the feed after p.After, sending what it reads, until a read
// returns less than a batch.
func (s *Service) catchUp(ctx context.Context, p *fulfillment.FeedParams, send func(fulfillment.OrderEvent) error) error {
	for {
		select {
		case <-s.stopping:
			return errFeedStopping
		default:
		}
		events, err := s.feed.FeedRead(ctx, *p)
		if err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return toStatus(ctx, s.log, err) // the caller resumes from its cursor
		}
		for _, e := range events {
			if err := send(e); err != nil {
				return err
			}
		}
		if len(events) < feedBatch {
			return nil
		}
	}
}

// follow sends the hub's batches that p selects and that come after
// p.After, until the stream ends or the hub drops it (errFeedDropped).
func (s *Service) follow(ctx context.Context, sub *feedSub, p *fulfillment.FeedParams, send func(fulfillment.OrderEvent) error) error {
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.stopping:
			return errFeedStopping
		case batch, ok := <-sub.batches:
			if !ok {
				return errFeedDropped
			}
			for _, e := range batch {
				if !p.After.Before(e.Cursor) || !p.Matches(e) {
					continue
				}
				if err := send(e); err != nil {
					return err
				}
			}
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
