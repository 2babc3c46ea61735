package server

import (
	"errors"
	"fmt"
	"strconv"
	"time"

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
			SKU:         l.GetSku(),
			Kind:        l.GetKind(),
			Quantity:    l.GetQuantity(),
			Currency:    l.GetUnitPrice().GetCurrency(),
			MinorUnits:  l.GetUnitPrice().GetMinorUnits(),
			AccountRef:  l.GetAccountRef(),
			Destination: l.GetDestination(),
			PlanID:      l.GetPlanId(),
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
			Sku:         l.SKU,
			Kind:        string(l.Kind),
			Quantity:    l.Quantity,
			UnitPrice:   &fulfillmentv1.Money{Currency: l.UnitPrice.Currency, MinorUnits: l.UnitPrice.MinorUnits},
			AccountRef:  l.AccountRef,
			Destination: l.Destination,
			PlanId:      l.PlanID,
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

// orderDetailToProto renders an order with its history. License keys and
// other entitlement values are shown only to tokens that own the org.
func orderDetailToProto(d fulfillment.OrderDetail, showSecrets bool) *fulfillmentv1.Order {
	pb := orderToProto(d.Order)
	h := &fulfillmentv1.OrderHistory{
		PaymentAttempts:        make([]*fulfillmentv1.PaymentAttempt, 0, len(d.Attempts)),
		OmittedPaymentAttempts: int32(d.OmittedAttempts),
		Entitlements:           make([]*fulfillmentv1.Entitlement, 0, len(d.Entitlements)),
		OmittedEntitlements:    int32(d.OmittedEntitlements),
		LedgerEntries:          make([]*fulfillmentv1.LedgerEntry, 0, len(d.Ledger)),
		OmittedLedgerEntries:   int32(d.OmittedLedger),
		Events:                 make([]*fulfillmentv1.OrderEvent, 0, len(d.Events)),
		OmittedEvents:          int32(d.OmittedEvents),
	}
	for _, a := range d.Attempts {
		pa := &fulfillmentv1.PaymentAttempt{
			Provider:    string(a.Provider),
			ProviderRef: a.AttemptRef,
			State:       string(a.State),
			CreateTime:  timestamppb.New(a.CreatedAt),
		}
		pa.Amount, pa.Token, pa.Network, pa.Currency = amountText(a.Amount)
		h.PaymentAttempts = append(h.PaymentAttempts, pa)
	}
	for _, e := range d.Entitlements {
		pe := &fulfillmentv1.Entitlement{
			Id:            strconv.FormatInt(e.ID, 10),
			Kind:          string(e.Kind),
			Sku:           e.SKU,
			Unit:          int64(e.Unit),
			CreateTime:    timestamppb.New(e.CreatedAt),
			RevokedReason: e.RevokedReason,
		}
		if e.RevokedAt != nil {
			pe.RevokeTime = timestamppb.New(*e.RevokedAt)
		}
		if showSecrets {
			pe.Value = e.Value
		}
		h.Entitlements = append(h.Entitlements, pe)
	}
	for _, l := range d.Ledger {
		h.LedgerEntries = append(h.LedgerEntries, &fulfillmentv1.LedgerEntry{
			Id:         strconv.FormatInt(l.ID, 10),
			AccountRef: l.AccountRef,
			Movement:   l.Movement,
			Amount:     &fulfillmentv1.Money{Currency: l.Amount.Currency, MinorUnits: l.Amount.MinorUnits},
			CreateTime: timestamppb.New(l.CreatedAt),
		})
	}
	for _, e := range d.Events {
		h.Events = append(h.Events, &fulfillmentv1.OrderEvent{
			EventId:        e.EventID,
			Type:           e.Type,
			ReceiveTime:    timestamppb.New(e.ReceivedAt),
			Decision:       string(e.Decision),
			DecisionReason: e.Reason,
			MatchedLater:   e.MatchedLater,
		})
	}
	for _, m := range d.Deliveries {
		h.Deliveries = append(h.Deliveries, deliveryToProto(m))
	}
	h.OmittedDeliveries = int32(d.OmittedDeliveries)
	for _, st := range d.Starts {
		h.PaymentStarts = append(h.PaymentStarts, paymentStartToProto(st))
	}
	for _, e := range d.Feed {
		h.FeedEvents = append(h.FeedEvents, &fulfillmentv1.OrderFeedEvent{
			Cursor: e.Cursor.String(), Topic: string(e.Topic), CreateTime: timestamppb.New(e.CreatedAt),
		})
	}
	pb.History = h
	return pb
}

// amountText renders an amount's value and unit as the API's flat fields:
// all empty for none.
func amountText(a fulfillment.Amount) (value, token, network, currency string) {
	if !a.Known() {
		return "", "", "", ""
	}
	return a.Value.String(), a.Unit.Token, a.Unit.Network, a.Unit.Currency
}

// amountFromText reads the API's flat amount fields; its unit is checked
// by the event's validation. An empty value is no amount.
func amountFromText(value, token, network, currency string) (fulfillment.Amount, error) {
	if value == "" {
		return fulfillment.Amount{}, nil
	}
	v, err := fulfillment.ParseDecimal(value)
	if err != nil {
		return fulfillment.Amount{}, err
	}
	return fulfillment.Amount{Value: v, Unit: fulfillment.Unit{Token: token, Network: network, Currency: currency}}, nil
}

// Provider references older gateways send in their own EventPayment fields.
const (
	refPaylinkID = "paylink_id"
	refTxHash    = "tx_hash"
)

// eventFromProto reads and validates a RecordEventRequest.
func eventFromProto(req *fulfillmentv1.RecordEventRequest) (fulfillment.ProviderEvent, error) {
	p := req.GetPayment()
	ev := fulfillment.ProviderEvent{
		Provider:    fulfillment.Provider(req.GetProvider()),
		EndpointID:  req.GetEndpointId(),
		OrgID:       req.GetOrgId(),
		Environment: fulfillment.Environment(req.GetEnvironment()),
		EventID:     req.GetEventId(),
		Type:        req.GetType(),
		Kind:        fulfillment.EventKind(req.GetKind()),
		TestMode:    req.GetTestMode(),
		Payment: fulfillment.PaymentInfo{
			AttemptRef:        p.GetAttemptRef(),
			PaymentID:         p.GetPaymentId(),
			InvoiceID:         p.GetInvoiceId(),
			CheckoutSessionID: p.GetCheckoutSessionId(),
			MerchantOrderID:   p.GetMerchantOrderId(),
			SubscriptionID:    p.GetSubscriptionId(),
			CustomerRef:       p.GetCustomerRef(),
		},
		Refs: refsFromProto(req),
	}
	if req.GetOccurTime() != nil {
		ev.OccurredAt = req.GetOccurTime().AsTime()
	}
	var vs []fulfillment.FieldViolation
	var err error
	if ev.Payment.Amount, err = amountFromText(p.GetAmount(), p.GetToken(), p.GetNetwork(), p.GetCurrency()); err != nil {
		vs = append(vs, fulfillment.FieldViolation{Field: "payment.amount", Description: "must be a decimal string such as \"25.000000\": " + err.Error()})
	}
	return ev, checkRecorded(ev, req.GetRawBody(), vs...)
}

// checkRecorded validates an event to be recorded with its raw body, with
// the violations found while reading it, if any: the rules of RecordEvent,
// whether called over gRPC or in-process.
func checkRecorded(ev fulfillment.ProviderEvent, rawBody []byte, read ...fulfillment.FieldViolation) error {
	var vs []fulfillment.FieldViolation
	var ve *fulfillment.ValidationError
	if errors.As(ev.Validate(), &ve) {
		vs = ve.Violations
	}
	vs = append(vs, read...)
	if n := len(rawBody); n == 0 || n > fulfillment.MaxRawBodyBytes {
		vs = append(vs, fulfillment.FieldViolation{Field: "raw_body", Description: fmt.Sprintf("is required, at most %d bytes", fulfillment.MaxRawBodyBytes)})
	}
	if len(vs) > 0 {
		return &fulfillment.ValidationError{Violations: vs}
	}
	return nil
}

// eventToProto is the RecordEventRequest of ev and its raw body: the
// inverse of eventFromProto.
func eventToProto(ev fulfillment.ProviderEvent, rawBody []byte) *fulfillmentv1.RecordEventRequest {
	p := ev.Payment
	req := &fulfillmentv1.RecordEventRequest{
		Provider:    string(ev.Provider),
		EndpointId:  ev.EndpointID,
		OrgId:       ev.OrgID,
		Environment: string(ev.Environment),
		EventId:     ev.EventID,
		Type:        ev.Type,
		Kind:        string(ev.Kind),
		TestMode:    ev.TestMode,
		Payment: &fulfillmentv1.EventPayment{
			AttemptRef:        p.AttemptRef,
			PaymentId:         p.PaymentID,
			InvoiceId:         p.InvoiceID,
			CheckoutSessionId: p.CheckoutSessionID,
			MerchantOrderId:   p.MerchantOrderID,
			SubscriptionId:    p.SubscriptionID,
			CustomerRef:       p.CustomerRef,
			// Deprecated fields, still filled for services that predate refs.
			PaylinkId: ev.Refs[refPaylinkID], //nolint:staticcheck // see above
			TxHash:    ev.Refs[refTxHash],    //nolint:staticcheck // see above
		},
		Refs:    ev.Refs,
		RawBody: rawBody,
	}
	pp := req.Payment
	pp.Amount, pp.Token, pp.Network, pp.Currency = amountText(p.Amount)
	if !ev.OccurredAt.IsZero() {
		req.OccurTime = timestamppb.New(ev.OccurredAt)
	}
	return req
}

// refsFromProto are the request's provider references, with those older
// gateways send in their own fields.
func refsFromProto(req *fulfillmentv1.RecordEventRequest) map[string]string {
	refs := req.GetRefs()
	for name, v := range map[string]string{refPaylinkID: req.GetPayment().GetPaylinkId(), refTxHash: req.GetPayment().GetTxHash()} {
		if _, set := refs[name]; v != "" && !set {
			if refs == nil {
				refs = map[string]string{}
			}
			refs[name] = v
		}
	}
	return refs
}

// filterTime reads a request's optional time filter, the zero time when
// absent. A Timestamp outside the range it may hold (0001-01-01 to
// 9999-12-31, as the REST gateway and protojson enforce) is a violation of
// field: the database would read it as another time, or fail.
func filterTime(field string, ts *timestamppb.Timestamp) (time.Time, error) {
	if ts == nil {
		return time.Time{}, nil
	}
	if ts.CheckValid() != nil {
		return time.Time{}, &fulfillment.ValidationError{Violations: []fulfillment.FieldViolation{{Field: field,
			Description: "must be a time from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z"}}}
	}
	return ts.AsTime(), nil
}
