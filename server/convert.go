package server

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// orderDraftFromProto reads a CreateOrderRequest; validation is the domain's.
func orderDraftFromProto(req *fulfillmentv1.CreateOrderRequest) fulfillment.OrderDraft {
	d := fulfillment.OrderDraft{
		OrgID:             req.GetOrgId(),
		Environment:       req.GetEnvironment(),
		MerchantOrderID:   req.GetMerchantOrderId(),
		CheckoutSessionID: req.GetCheckoutSessionId(),
		Lines:             make([]fulfillment.LineDraft, len(req.GetLines())),
	}
	for i, l := range req.GetLines() {
		d.Lines[i] = fulfillment.LineDraft{
			SKU:        l.GetSku(),
			Kind:       l.GetKind(),
			Quantity:   l.GetQuantity(),
			Currency:   l.GetUnitPrice().GetCurrency(),
			MinorUnits: l.GetUnitPrice().GetMinorUnits(),
			AccountRef: l.GetAccountRef(),
		}
	}
	if s := req.GetSettlement(); s != nil {
		d.Settlement = &fulfillment.SettlementDraft{
			Token:     s.GetToken(),
			Network:   s.GetNetwork(),
			Amount:    s.GetAmount(),
			Tolerance: s.GetTolerance(),
		}
	}
	return d
}

// orderToProto renders an order for a caller.
func orderToProto(o fulfillment.Order) *fulfillmentv1.Order {
	total := o.Total()
	pb := &fulfillmentv1.Order{
		Id:                o.ID,
		OrgId:             o.OrgID,
		Environment:       string(o.Environment),
		MerchantOrderId:   o.MerchantOrderID,
		CheckoutSessionId: o.CheckoutSessionID,
		State:             string(o.State),
		Lines:             make([]*fulfillmentv1.OrderLine, len(o.Lines)),
		Total:             &fulfillmentv1.Money{Currency: total.Currency, MinorUnits: total.MinorUnits},
		CreateTime:        timestamppb.New(o.CreatedAt),
		UpdateTime:        timestamppb.New(o.UpdatedAt),
	}
	for i, l := range o.Lines {
		pb.Lines[i] = &fulfillmentv1.OrderLine{
			Sku:        l.SKU,
			Kind:       string(l.Kind),
			Quantity:   l.Quantity,
			UnitPrice:  &fulfillmentv1.Money{Currency: l.UnitPrice.Currency, MinorUnits: l.UnitPrice.MinorUnits},
			AccountRef: l.AccountRef,
		}
	}
	if s := o.Settlement; s != nil {
		pb.Settlement = &fulfillmentv1.Settlement{
			Token:     s.Token,
			Network:   s.Network,
			Amount:    s.Amount.String(),
			Tolerance: s.Tolerance.String(),
		}
	}
	return pb
}
