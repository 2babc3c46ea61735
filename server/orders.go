package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"strings"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// OrderService implements the order RPCs of fulfillment.v1.FulfillmentService.
type OrderService struct {
	fulfillmentv1.UnimplementedFulfillmentServiceServer

	store fulfillment.OrderStore
	log   *slog.Logger
}

var _ fulfillmentv1.FulfillmentServiceServer = (*OrderService)(nil)

// NewOrderService returns the service backed by store.
func NewOrderService(store fulfillment.OrderStore, log *slog.Logger) *OrderService {
	return &OrderService{store: store, log: log}
}

// CreateOrder implements fulfillmentv1.FulfillmentServiceServer.
func (s *OrderService) CreateOrder(ctx context.Context, req *fulfillmentv1.CreateOrderRequest) (*fulfillmentv1.CreateOrderResponse, error) {
	spec, err := orderDraftFromProto(req).Validate()
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
func (s *OrderService) GetOrder(ctx context.Context, req *fulfillmentv1.GetOrderRequest) (*fulfillmentv1.GetOrderResponse, error) {
	if err := fulfillment.ValidateOrderID("order_id", req.GetOrderId()); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	order, err := s.store.OrderGet(ctx, req.GetOrderId())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if err := requireOrg(principalFrom(ctx), order.OrgID); err != nil {
		return nil, err
	}
	return &fulfillmentv1.GetOrderResponse{Order: orderToProto(order)}, nil
}

// ListOrders implements fulfillmentv1.FulfillmentServiceServer.
func (s *OrderService) ListOrders(ctx context.Context, req *fulfillmentv1.ListOrdersRequest) (*fulfillmentv1.ListOrdersResponse, error) {
	p := principalFrom(ctx)
	filter := fulfillment.OrderFilter{
		VisibleOrgs:     p.VisibleOrgs(),
		OrgID:           req.GetOrgId(),
		Environment:     fulfillment.Environment(req.GetEnvironment()),
		State:           fulfillment.State(req.GetState()),
		MerchantOrderID: req.GetMerchantOrderId(),
	}
	if err := filter.Validate(); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if filter.OrgID != "" {
		if err := requireOrg(p, filter.OrgID); err != nil {
			return nil, err
		}
	}
	limit, err := fulfillment.PageSize(req.GetPageSize())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	params := fulfillment.OrderListParams{Filter: filter, Limit: limit + 1}
	if req.GetPageToken() != "" {
		if params.BeforeID, err = decodePageToken(req.GetPageToken(), filter); err != nil {
			return nil, toStatus(ctx, s.log, err)
		}
	}
	orders, err := s.store.OrderList(ctx, params)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	resp := &fulfillmentv1.ListOrdersResponse{}
	if len(orders) > limit {
		orders = orders[:limit]
		resp.NextPageToken = encodePageToken(orders[limit-1].ID, filter)
	}
	resp.Orders = make([]*fulfillmentv1.Order, len(orders))
	for i, o := range orders {
		resp.Orders[i] = orderToProto(o)
	}
	return resp, nil
}

// pageToken continues a listing. It is bound to the filter it was issued
// for, so that a token cannot be replayed with other filters (or by a caller
// who sees other orgs).
type pageToken struct {
	BeforeID string `json:"b"`
	Filter   string `json:"f"`
}

func filterDigest(f fulfillment.OrderFilter) string {
	parts := append([]string{f.OrgID, string(f.Environment), string(f.State), f.MerchantOrderID}, f.VisibleOrgs...)
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

func encodePageToken(beforeID string, f fulfillment.OrderFilter) string {
	b, _ := json.Marshal(pageToken{BeforeID: beforeID, Filter: filterDigest(f)})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodePageToken(token string, f fulfillment.OrderFilter) (string, error) {
	bad := &fulfillment.ValidationError{Violations: []fulfillment.FieldViolation{{
		Field:       "page_token",
		Description: "is not a token from a previous response with the same filters; start again without page_token",
	}}}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", bad
	}
	var t pageToken
	if json.Unmarshal(raw, &t) != nil || t.Filter != filterDigest(f) || fulfillment.ValidateOrderID("page_token", t.BeforeID) != nil {
		return "", bad
	}
	return t.BeforeID, nil
}
