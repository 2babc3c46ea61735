package server

import (
	"context"
	"strconv"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// ListReconciliationItems implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) ListReconciliationItems(ctx context.Context, req *fulfillmentv1.ListReconciliationItemsRequest) (*fulfillmentv1.ListReconciliationItemsResponse, error) {
	p := principalFrom(ctx)
	filter := fulfillment.ReconFilter{
		VisibleOrgs: p.VisibleOrgs(),
		OrgID:       req.GetOrgId(),
		Kind:        fulfillment.ReconKind(req.GetKind()),
		State:       fulfillment.ReconState(req.GetState()),
		OrderID:     req.GetOrderId(),
	}
	pg, err := s.listing(ctx, p, filter.Validate(), filter.OrgID, req,
		filter.OrgID, string(filter.Kind), string(filter.State), filter.OrderID, filter.VisibleOrgs)
	if err != nil {
		return nil, err
	}
	fetch := func(before int64, limit int) ([]fulfillment.ReconItem, error) {
		return s.recon.ReconList(ctx, fulfillment.ReconListParams{Filter: filter, BeforeID: before, Limit: limit})
	}
	resp := &fulfillmentv1.ListReconciliationItemsResponse{}
	resp.Items, resp.NextPageToken, err = fillIDPage(pg, fetch, reconItemToProto, func(it fulfillment.ReconItem) int64 { return it.ID })
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return resp, nil
}

func reconItemToProto(it fulfillment.ReconItem) *fulfillmentv1.ReconciliationItem {
	pb := &fulfillmentv1.ReconciliationItem{
		Id:          strconv.FormatInt(it.ID, 10),
		Kind:        string(it.Kind),
		State:       string(it.State),
		OrgId:       it.OrgID,
		Environment: string(it.Environment),
		OrderId:     it.OrderID,
		EventId:     it.EventID,
		Provider:    string(it.Provider),
		AttemptRef:  it.AttemptRef,
		PaymentId:   it.PaymentID,

		Detail:         it.Detail,
		CreateTime:     timestamppb.New(it.CreatedAt),
		ResolvedBy:     it.ResolvedBy,
		ResolutionNote: it.ResolutionNote,
	}
	pb.Amount, pb.Token, pb.Network, pb.Currency = amountText(it.Amount)
	if it.Expected.Known() {
		pb.ExpectedAmount = it.Expected.Value.String()
		if !it.Amount.Known() {
			_, pb.Token, pb.Network, pb.Currency = amountText(it.Expected)
		}
	}
	if it.MessageID != 0 {
		pb.OutboxMessageId = strconv.FormatInt(it.MessageID, 10)
	}
	if it.ResolvedAt != nil {
		pb.ResolveTime = timestamppb.New(*it.ResolvedAt)
	}
	return pb
}
