package server

import (
	"context"
	"strconv"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// ListReconciliationItems implements fulfillmentv1.FulfillmentServiceServer.
func (s *OrderService) ListReconciliationItems(ctx context.Context, req *fulfillmentv1.ListReconciliationItemsRequest) (*fulfillmentv1.ListReconciliationItemsResponse, error) {
	p := principalFrom(ctx)
	filter := fulfillment.ReconFilter{
		VisibleOrgs: p.VisibleOrgs(),
		OrgID:       req.GetOrgId(),
		Kind:        fulfillment.ReconKind(req.GetKind()),
		State:       fulfillment.ReconState(req.GetState()),
		OrderID:     req.GetOrderId(),
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
	digest := pageDigest(filter.OrgID, string(filter.Kind), string(filter.State), filter.OrderID, filter.VisibleOrgs)
	params := fulfillment.ReconListParams{Filter: filter, Limit: limit + 1}
	if req.GetPageToken() != "" {
		before, err := decodePageToken(req.GetPageToken(), digest)
		if err == nil {
			params.BeforeID, err = strconv.ParseInt(before, 10, 64)
		}
		if err != nil {
			return nil, toStatus(ctx, s.log, badPageToken())
		}
	}
	items, err := s.recon.ReconList(ctx, params)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	resp := &fulfillmentv1.ListReconciliationItemsResponse{}
	if len(items) > limit {
		items = items[:limit]
		resp.NextPageToken = encodePageToken(strconv.FormatInt(items[limit-1].ID, 10), digest)
	}
	resp.Items = make([]*fulfillmentv1.ReconciliationItem, len(items))
	for i, it := range items {
		resp.Items[i] = reconItemToProto(it)
	}
	return resp, nil
}

func reconItemToProto(it fulfillment.ReconItem) *fulfillmentv1.ReconciliationItem {
	pb := &fulfillmentv1.ReconciliationItem{
		Id:             strconv.FormatInt(it.ID, 10),
		Kind:           string(it.Kind),
		State:          string(it.State),
		OrgId:          it.OrgID,
		Environment:    string(it.Environment),
		OrderId:        it.OrderID,
		EventId:        it.EventID,
		Provider:       string(it.Provider),
		AttemptRef:     it.AttemptRef,
		PaymentId:      it.PaymentID,
		Token:          it.Token,
		Network:        it.Network,
		Detail:         it.Detail,
		CreateTime:     timestamppb.New(it.CreatedAt),
		ResolvedBy:     it.ResolvedBy,
		ResolutionNote: it.ResolutionNote,
	}
	if it.Amount != nil {
		pb.Amount = it.Amount.String()
	}
	if it.ExpectedAmount != nil {
		pb.ExpectedAmount = it.ExpectedAmount.String()
	}
	if it.ResolvedAt != nil {
		pb.ResolveTime = timestamppb.New(*it.ResolvedAt)
	}
	return pb
}
