package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// OrderService implements fulfillment.v1.FulfillmentService.
type OrderService struct {
	fulfillmentv1.UnimplementedFulfillmentServiceServer

	store fulfillment.OrderStore
	inbox fulfillment.InboxStore
	recon fulfillment.ReconStore
	log   *slog.Logger
}

var _ fulfillmentv1.FulfillmentServiceServer = (*OrderService)(nil)

// NewOrderService returns the service backed by store.
func NewOrderService(store Store, log *slog.Logger) *OrderService {
	return &OrderService{store: store, inbox: store, recon: store, log: log}
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
	detail, err := s.store.OrderDetail(ctx, req.GetOrderId())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	p := principalFrom(ctx)
	if err := requireOrg(p, detail.OrgID); err != nil {
		return nil, err
	}
	return &fulfillmentv1.GetOrderResponse{Order: orderDetailToProto(detail, p.OwnsOrg(detail.OrgID))}, nil
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
	digest := pageDigest(filter.OrgID, string(filter.Environment), string(filter.State), filter.MerchantOrderID, filter.VisibleOrgs)
	params := fulfillment.OrderListParams{Filter: filter, Limit: limit + 1}
	if req.GetPageToken() != "" {
		before, err := decodePageToken(req.GetPageToken(), digest)
		if err != nil || fulfillment.ValidateOrderID("page_token", before) != nil {
			return nil, toStatus(ctx, s.log, badPageToken())
		}
		params.BeforeID = before
	}
	orders, err := s.store.OrderList(ctx, params)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	resp := &fulfillmentv1.ListOrdersResponse{}
	if len(orders) > limit {
		orders = orders[:limit]
		resp.NextPageToken = encodePageToken(orders[limit-1].ID, digest)
	}
	resp.Orders = make([]*fulfillmentv1.Order, len(orders))
	for i, o := range orders {
		resp.Orders[i] = orderToProto(o)
	}
	return resp, nil
}

// pageToken continues a listing. It is bound to the filters it was issued
// for, so that a token cannot be replayed with other filters (or by a caller
// who sees other orgs).
type pageToken struct {
	Before string `json:"b"`
	Filter string `json:"f"`
}

// pageDigest identifies a listing's filters and the caller's visible orgs.
func pageDigest(parts ...any) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%q", parts))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

func encodePageToken(before, digest string) string {
	b, _ := json.Marshal(pageToken{Before: before, Filter: digest})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodePageToken returns the position a token continues from, or an error
// when it was not issued for these filters.
func decodePageToken(token, digest string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", err
	}
	var t pageToken
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", err
	}
	if t.Filter != digest || t.Before == "" {
		return "", errors.New("page token issued for other filters")
	}
	return t.Before, nil
}

func badPageToken() error {
	return &fulfillment.ValidationError{Violations: []fulfillment.FieldViolation{{
		Field:       "page_token",
		Description: "is not a token from a previous response with the same filters; start again without page_token",
	}}}
}
