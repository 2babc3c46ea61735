package server

import (
	"context"
	"log/slog"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// Service implements fulfillment.v1.FulfillmentService.
type Service struct {
	fulfillmentv1.UnimplementedFulfillmentServiceServer

	store  fulfillment.OrderStore
	inbox  fulfillment.InboxStore
	recon  fulfillment.ReconStore
	events fulfillment.EventStore
	outbox fulfillment.OutboxStore
	feed   fulfillment.FeedStore
	// feedHub reads the feed's tail once for every stream.
	feedHub *feedHub
	// payStore keeps the payments the service starts through payments,
	// the providers by endpoint id.
	payStore fulfillment.PaymentStore
	payments map[string]fulfillment.PaymentProvider
	// feeds counts the feed streams being served.
	feeds feedSlots
	// stopping is closed when the server starts shutting down: feed
	// streams, which never end on their own, end then.
	stopping chan struct{}
	log      *slog.Logger
	cfg      *Config

	// endpoints are the configured webhook endpoints, by id: RecordEvent
	// accepts events of these only.
	endpoints map[string]fulfillment.Endpoint
	// destinations are the ids of the configured destinations: external
	// order lines name one of them.
	destinations map[string]bool
	// subs reads subscriptions; plans are the configured plans, by id:
	// subscription lines and subscriptions name one of them.
	subs  fulfillment.SubscriptionReader
	plans fulfillment.Plans
	// redrive keeps bulk re-drive runs; redriveWake wakes the applier when
	// one starts (redrive.go).
	redrive     fulfillment.RedriveStore
	redriveWake chan struct{}
	// maxPageBytes caps the encoded items of one listing page.
	maxPageBytes int
	// activity keeps the counted minutes of GetActivity (activity.go).
	activity *activityMemo
}

var _ fulfillmentv1.FulfillmentServiceServer = (*Service)(nil)

// newService returns the service backed by store, for the configuration cfg.
func newService(store Store, cfg *Config, log *slog.Logger) *Service {
	s := &Service{store: store, inbox: store, recon: store, events: store, outbox: store, feed: store, payStore: store, subs: store,
		redrive: store, redriveWake: make(chan struct{}, 1), activity: newActivityMemo(),
		log: log, cfg: cfg, plans: cfg.Plans, endpoints: cfg.Endpoints,
		stopping:     make(chan struct{}),
		maxPageBytes: cfg.GRPC.WithDefaults().MaxPageBytes,
	}
	s.feedHub = newFeedHub(store, log)
	s.destinations = make(map[string]bool, len(cfg.Destinations))
	for _, d := range cfg.Destinations {
		s.destinations[d.ID] = true
	}
	return s
}

// CreateOrder implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) CreateOrder(ctx context.Context, req *fulfillmentv1.CreateOrderRequest) (*fulfillmentv1.CreateOrderResponse, error) {
	spec, err := orderDraftFromProto(req).Validate()
	if err == nil {
		err = joinViolations(spec.CheckDestinations(func(id string) bool { return s.destinations[id] }),
			spec.CheckPlans(s.planConfigured))
	}
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if err := requireOrg(principalFrom(ctx), spec.OrgID); err != nil {
		return nil, err
	}
	order, created, err := s.store.OrderCreate(ctx, spec)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &fulfillmentv1.CreateOrderResponse{Order: orderToProto(order), Created: created}, nil
}

// GetOrder implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) GetOrder(ctx context.Context, req *fulfillmentv1.GetOrderRequest) (*fulfillmentv1.GetOrderResponse, error) {
	if err := fulfillment.ValidateOrderID("order_id", req.GetOrderId()); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	detail, err := s.store.OrderDetail(ctx, req.GetOrderId())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	p := principalFrom(ctx)
	if err := requireVisible(p, detail.OrgID, fulfillment.ErrOrderNotFound); err != nil {
		return nil, err
	}
	return &fulfillmentv1.GetOrderResponse{Order: orderDetailToProto(detail, p.OwnsOrg(detail.OrgID))}, nil
}

// ListOrders implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) ListOrders(ctx context.Context, req *fulfillmentv1.ListOrdersRequest) (*fulfillmentv1.ListOrdersResponse, error) {
	p := principalFrom(ctx)
	filter := fulfillment.OrderFilter{
		VisibleOrgs:     p.VisibleOrgs(),
		OrgID:           req.GetOrgId(),
		Environment:     fulfillment.Environment(req.GetEnvironment()),
		State:           fulfillment.State(req.GetState()),
		MerchantOrderID: req.GetMerchantOrderId(),
		CustomerRef:     req.GetCustomerRef(),
		PaymentRef:      req.GetPaymentRef(),
	}
	pg, err := s.listing(ctx, p, filter.Validate(), filter.OrgID, req,
		filter.OrgID, string(filter.Environment), string(filter.State), filter.MerchantOrderID, filter.VisibleOrgs,
		filter.CustomerRef, filter.PaymentRef)
	if err != nil {
		return nil, err
	}
	if pg.before != "" && fulfillment.ValidateOrderID("page_token", pg.before) != nil {
		return nil, toStatus(ctx, s.log, badPageToken())
	}
	fetch := func(before string, limit int) ([]fulfillment.Order, error) {
		return s.store.OrderList(ctx, fulfillment.OrderListParams{Filter: filter, BeforeID: before, Limit: limit})
	}
	resp := &fulfillmentv1.ListOrdersResponse{}
	resp.Orders, resp.NextPageToken, err = fillPage(pg, fetch, orderToProto, func(o fulfillment.Order) string { return o.ID })
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return resp, nil
}
