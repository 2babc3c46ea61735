package server

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// maxSummaries bounds the org and environment pairs one summary shows.
const maxSummaries = 1000

// ListReconciliationItems implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) ListReconciliationItems(ctx context.Context, req *fulfillmentv1.ListReconciliationItemsRequest) (*fulfillmentv1.ListReconciliationItemsResponse, error) {
	p := principalFrom(ctx)
	filter := fulfillment.ReconFilter{
		VisibleOrgs: p.VisibleOrgs(),
		OrgID:       req.GetOrgId(),
		Environment: fulfillment.Environment(req.GetEnvironment()),
		Kind:        fulfillment.ReconKind(req.GetKind()),
		State:       fulfillment.ReconState(req.GetState()),
		OrderID:     req.GetOrderId(),
	}
	var fromErr, beforeErr error
	filter.CreatedFrom, fromErr = filterTime("create_time_from", req.GetCreateTimeFrom())
	filter.CreatedBefore, beforeErr = filterTime("create_time_before", req.GetCreateTimeBefore())
	pg, err := s.listing(ctx, p, joinViolations(filter.Validate(), fromErr, beforeErr), filter.OrgID, req,
		filter.OrgID, string(filter.Kind), string(filter.State), filter.OrderID, filter.VisibleOrgs,
		string(filter.Environment), filter.CreatedFrom.UnixNano(), filter.CreatedBefore.UnixNano())
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

// GetReconciliationSummary implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) GetReconciliationSummary(ctx context.Context, req *fulfillmentv1.GetReconciliationSummaryRequest) (*fulfillmentv1.GetReconciliationSummaryResponse, error) {
	p := principalFrom(ctx)
	filter := fulfillment.ReconFilter{
		VisibleOrgs: p.VisibleOrgs(),
		OrgID:       req.GetOrgId(),
		Environment: fulfillment.Environment(req.GetEnvironment()),
	}
	if err := filter.Validate(); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if filter.OrgID != "" {
		if err := requireOrg(p, filter.OrgID); err != nil {
			return nil, err
		}
	}
	rows, err := s.recon.ReconSummary(ctx, filter)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	now := time.Now()
	resp := &fulfillmentv1.GetReconciliationSummaryResponse{CheckTime: timestamppb.New(now)}
	if len(rows) > maxSummaries {
		resp.OmittedSummaries = int32(len(rows) - maxSummaries)
		rows = rows[:maxSummaries]
	}
	for _, r := range rows {
		pb := &fulfillmentv1.ReconciliationSummary{
			OrgId: r.OrgID, Environment: string(r.Environment), OpenItems: r.OpenItems(),
			EventsPending: r.EventsPending, EventsFailed: r.EventsFailed, PaidNotFulfilled: r.PaidNotFulfilled,
			OutboxFailed: r.OutboxFailed, OutboxUncertain: r.OutboxUncertain,
		}
		for _, k := range fulfillment.ReconKinds {
			if n := r.OpenByKind[k]; n > 0 {
				pb.OpenByKind = append(pb.OpenByKind, &fulfillmentv1.ReconciliationKindCount{Kind: string(k), Open: n})
			}
		}
		if r.OldestOpen != nil {
			pb.OldestOpenTime = timestamppb.New(*r.OldestOpen)
			pb.OldestOpenAge = durationpb.New(max(now.Sub(*r.OldestOpen), 0).Truncate(time.Second))
		}
		resp.Summaries = append(resp.Summaries, pb)
	}
	return resp, nil
}

// GetReconciliationItem implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) GetReconciliationItem(ctx context.Context, req *fulfillmentv1.GetReconciliationItemRequest) (*fulfillmentv1.GetReconciliationItemResponse, error) {
	it, err := s.visibleReconItem(ctx, req.GetItemId())
	if err != nil {
		return nil, err
	}
	ev, err := s.evidence(ctx, it)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &fulfillmentv1.GetReconciliationItemResponse{Item: reconItemToProto(it), Evidence: ev}, nil
}

// ResolveReconciliationItem implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) ResolveReconciliationItem(ctx context.Context, req *fulfillmentv1.ResolveReconciliationItemRequest) (*fulfillmentv1.ResolveReconciliationItemResponse, error) {
	p := principalFrom(ctx)
	r := fulfillment.ReconResolve{
		Resolution:  fulfillment.ReconResolution(req.GetResolution()),
		Note:        req.GetNote(),
		Actor:       p.Name,
		ActorDetail: req.GetActorDetail(),
	}
	if err := r.Validate(); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	it, err := s.visibleReconItem(ctx, req.GetItemId())
	if err != nil {
		return nil, err
	}
	r.ID = it.ID
	if it, err = s.recon.ReconResolve(ctx, r); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	s.log.InfoContext(ctx, "reconciliation item resolved", "item_id", it.ID, "kind", it.Kind, "resolution", it.Resolution)
	return &fulfillmentv1.ResolveReconciliationItemResponse{Item: reconItemToProto(it)}, nil
}

// visibleReconItem reads the item id names, when the caller may see its
// org; another org's item is NOT_FOUND, as an unknown id (requireVisible).
func (s *Service) visibleReconItem(ctx context.Context, id string) (fulfillment.ReconItem, error) {
	n, err := fulfillment.ParseReconItemID("item_id", id)
	if err != nil {
		return fulfillment.ReconItem{}, toStatus(ctx, s.log, err)
	}
	it, err := s.recon.ReconGet(ctx, n)
	if err != nil {
		return it, toStatus(ctx, s.log, err)
	}
	if err := requireVisible(principalFrom(ctx), it.OrgID, fulfillment.NotFoundID("reconciliation item", n)); err != nil {
		return it, err
	}
	return it, nil
}

// evidence reads what it links, each as its own Get shows it (bounded the
// same way). Links point into the item's own org.
func (s *Service) evidence(ctx context.Context, it fulfillment.ReconItem) (*fulfillmentv1.ReconciliationEvidence, error) {
	p := principalFrom(ctx)
	ev := &fulfillmentv1.ReconciliationEvidence{}
	if it.OrderID != "" {
		d, err := s.store.OrderDetail(ctx, it.OrderID)
		if err != nil {
			return nil, err
		}
		// License keys are secrets GetOrder shows to orders:read only.
		ev.Order = orderDetailToProto(d, p.OwnsOrg(d.OrgID) && p.HasScope(config.ScopeOrdersRead))
		for _, st := range d.Starts {
			if st.ID == it.PaymentStartID {
				ev.PaymentStart = paymentStartToProto(st)
			}
		}
	}
	if it.InboxID != 0 {
		e, err := s.events.EventGet(ctx, it.InboxID, false)
		if err != nil {
			return nil, err
		}
		ev.Event = inboxEventToProto(e, "")
	}
	if it.MessageID != 0 {
		d, err := s.outbox.DeliveryGet(ctx, it.MessageID)
		if err != nil {
			return nil, err
		}
		ev.Delivery = deliveryToProto(d)
	}
	if it.SubscriptionID != "" {
		d, err := s.subs.SubscriptionGet(ctx, it.SubscriptionID)
		if err != nil {
			return nil, err
		}
		ev.Subscription = subscriptionToProto(d.SubscriptionRecord)
	}
	return ev, nil
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

		Detail:           it.Detail,
		CreateTime:       timestamppb.New(it.CreatedAt),
		ResolvedBy:       it.ResolvedBy,
		ResolutionNote:   it.ResolutionNote,
		Resolution:       string(it.Resolution),
		ResolvedByDetail: it.ResolvedByDetail,
		SubscriptionId:   it.SubscriptionID,
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
	if it.InboxID != 0 {
		pb.InboxEventId = strconv.FormatInt(it.InboxID, 10)
	}
	if it.PaymentStartID != 0 {
		pb.PaymentStartId = strconv.FormatInt(it.PaymentStartID, 10)
	}
	if it.ResolvedAt != nil {
		pb.ResolveTime = timestamppb.New(*it.ResolvedAt)
	}
	return pb
}

// GetActivity implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) GetActivity(ctx context.Context, req *fulfillmentv1.GetActivityRequest) (*fulfillmentv1.GetActivityResponse, error) {
	p := principalFrom(ctx)
	filter := fulfillment.ReconFilter{
		VisibleOrgs: p.VisibleOrgs(),
		OrgID:       req.GetOrgId(),
		Environment: fulfillment.Environment(req.GetEnvironment()),
	}
	now := time.Now()
	start, n, err := fulfillment.ActivityWindow(now, int(req.GetMinutes()))
	if err == nil {
		err = filter.Validate()
	}
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if filter.OrgID != "" {
		if err := requireOrg(p, filter.OrgID); err != nil {
			return nil, err
		}
	}
	key := activityKey(filter)
	if last, at, ok := s.activity.recent(key, start, n, now); ok {
		return activityResponse(last, at), nil
	}
	since, kept := s.activity.since(key, start, n)
	counts, err := s.recon.ReconActivity(ctx, filter, since)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	fresh := fulfillment.ActivityMinutes(since, n-int(since.Sub(start)/time.Minute), counts)
	return activityResponse(s.activity.window(key, start, n, kept, fresh, now), now), nil
}

func activityResponse(ms []fulfillment.ActivityMinute, at time.Time) *fulfillmentv1.GetActivityResponse {
	resp := &fulfillmentv1.GetActivityResponse{CheckTime: timestamppb.New(at)}
	for _, m := range ms {
		resp.Minutes = append(resp.Minutes, &fulfillmentv1.ActivityMinute{
			StartTime: timestamppb.New(m.Start), EventsReceived: m.EventsReceived,
			OrdersFulfilled: m.OrdersFulfilled, MessagesDelivered: m.MessagesDelivered,
		})
	}
	return resp
}
