package server

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// Bulk re-drive: the API plans, starts, shows and cancels runs; the
// server's redriver applies running runs in batches (redriveLoop).

// Applier bounds: a batch is one transaction; an idle applier looks for
// runs (started by another replica, or left by a stopped one) this often.
const (
	redriveBatch = 200
	redrivePoll  = time.Second
)

// redriveFilterFromProto reads a request's filter; the error is its times'
// violations, if any (filterTime).
func redriveFilterFromProto(f *fulfillmentv1.RedriveFilter) (fulfillment.RedriveFilter, error) {
	out := fulfillment.RedriveFilter{
		Target: fulfillment.RedriveTarget(f.GetTarget()), OrgID: f.GetOrgId(), Environment: fulfillment.Environment(f.GetEnvironment()),
		State: f.GetState(), Type: f.GetType(), Decision: f.GetDecision(), EndpointID: f.GetEndpointId(), DestinationID: f.GetDestinationId(),
		Provider: fulfillment.Provider(f.GetProvider()),
	}
	var afterErr, beforeErr error
	out.ReceivedAfter, afterErr = filterTime("filter.received_after", f.GetReceivedAfter())
	out.ReceivedBefore, beforeErr = filterTime("filter.received_before", f.GetReceivedBefore())
	return out, joinViolations(afterErr, beforeErr)
}

func redriveFilterToProto(f fulfillment.RedriveFilter) *fulfillmentv1.RedriveFilter {
	out := &fulfillmentv1.RedriveFilter{
		Target: string(f.Target), OrgId: f.OrgID, Environment: string(f.Environment), State: f.State,
		Type: f.Type, Decision: f.Decision, EndpointId: f.EndpointID, DestinationId: f.DestinationID, Provider: string(f.Provider),
	}
	if !f.ReceivedAfter.IsZero() {
		out.ReceivedAfter = timestamppb.New(f.ReceivedAfter)
	}
	if !f.ReceivedBefore.IsZero() {
		out.ReceivedBefore = timestamppb.New(f.ReceivedBefore)
	}
	return out
}

func redriveToProto(d fulfillment.Redrive) *fulfillmentv1.Redrive {
	out := &fulfillmentv1.Redrive{
		Id: strconv.FormatInt(d.ID, 10), Filter: redriveFilterToProto(d.Filter), State: string(d.State),
		Total: d.Total, Applied: d.Applied, Skipped: d.Skipped, CreatedBy: d.CreatedBy, CreatedByDetail: d.CreatedByDetail,
		CreateTime: timestamppb.New(d.CreatedAt), CancelledBy: d.CancelledBy,
	}
	if !d.FinishedAt.IsZero() {
		out.FinishTime = timestamppb.New(d.FinishedAt)
	}
	return out
}

// checkedRedriveFilter validates a request's filter and the caller's right
// to its org.
func (s *Service) checkedRedriveFilter(ctx context.Context, pf *fulfillmentv1.RedriveFilter) (fulfillment.RedriveFilter, error) {
	f, terr := redriveFilterFromProto(pf)
	if err := joinViolations(f.Validate(), terr); err != nil {
		return f, toStatus(ctx, s.log, err)
	}
	if err := requireOrg(principalFrom(ctx), f.OrgID); err != nil {
		return f, err
	}
	if f.DestinationID != "" {
		// A retry is delivered by the destination's dispatcher: one that is
		// not configured (a typo, or removed) has none.
		if _, err := s.configuredDestination(ctx, f.DestinationID); err != nil {
			return f, err
		}
	}
	return f, nil
}

// PlanRedrive implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) PlanRedrive(ctx context.Context, req *fulfillmentv1.PlanRedriveRequest) (*fulfillmentv1.PlanRedriveResponse, error) {
	f, err := s.checkedRedriveFilter(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	p, err := s.redrive.RedrivePlan(ctx, f)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	resp := &fulfillmentv1.PlanRedriveResponse{Matched: min(p.Matched, fulfillment.MaxRedriveItems+1),
		Capped: p.Matched > fulfillment.MaxRedriveItems, Effect: f.Effect()}
	for _, x := range p.Sample {
		resp.Sample = append(resp.Sample, &fulfillmentv1.RedriveSample{Id: strconv.FormatInt(x.ID, 10), Summary: x.Summary, OrderId: x.OrderID})
	}
	return resp, nil
}

// StartRedrive implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) StartRedrive(ctx context.Context, req *fulfillmentv1.StartRedriveRequest) (*fulfillmentv1.StartRedriveResponse, error) {
	f, err := s.checkedRedriveFilter(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	if err := fulfillment.ValidateActorDetail("actor_detail", req.GetActorDetail()); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	d, err := s.redrive.RedriveStart(ctx, f, principalFrom(ctx).Name, req.GetActorDetail())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	s.log.InfoContext(ctx, "re-drive started", "redrive_id", d.ID, "org", f.OrgID, "target", f.Target, "items", d.Total)
	select {
	case s.redriveWake <- struct{}{}:
	default:
	}
	return &fulfillmentv1.StartRedriveResponse{Redrive: redriveToProto(d)}, nil
}

// visibleRedrive reads the run named by id, when the caller may see its org.
func (s *Service) visibleRedrive(ctx context.Context, id string) (fulfillment.Redrive, error) {
	n, err := fulfillment.ParseRedriveID("redrive_id", id)
	if err != nil {
		return fulfillment.Redrive{}, toStatus(ctx, s.log, err)
	}
	d, err := s.redrive.RedriveGet(ctx, n)
	if err != nil {
		return d, toStatus(ctx, s.log, err)
	}
	if err := requireVisible(principalFrom(ctx), d.Filter.OrgID, fulfillment.NotFoundID("re-drive", n)); err != nil {
		return d, err
	}
	return d, nil
}

// GetRedrive implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) GetRedrive(ctx context.Context, req *fulfillmentv1.GetRedriveRequest) (*fulfillmentv1.GetRedriveResponse, error) {
	d, err := s.visibleRedrive(ctx, req.GetRedriveId())
	if err != nil {
		return nil, err
	}
	return &fulfillmentv1.GetRedriveResponse{Redrive: redriveToProto(d)}, nil
}

// ListRedrives implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) ListRedrives(ctx context.Context, req *fulfillmentv1.ListRedrivesRequest) (*fulfillmentv1.ListRedrivesResponse, error) {
	p := principalFrom(ctx)
	if org := req.GetOrgId(); org != "" {
		if err := fulfillment.ValidateOrgID("org_id", org); err != nil {
			return nil, toStatus(ctx, s.log, err)
		}
		if err := requireOrg(p, org); err != nil {
			return nil, err
		}
	}
	ds, err := s.redrive.RedriveList(ctx, p.VisibleOrgs(), req.GetOrgId())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	resp := &fulfillmentv1.ListRedrivesResponse{}
	for _, d := range ds {
		resp.Redrives = append(resp.Redrives, redriveToProto(d))
	}
	return resp, nil
}

// CancelRedrive implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) CancelRedrive(ctx context.Context, req *fulfillmentv1.CancelRedriveRequest) (*fulfillmentv1.CancelRedriveResponse, error) {
	d, err := s.visibleRedrive(ctx, req.GetRedriveId())
	if err != nil {
		return nil, err
	}
	d, err = s.redrive.RedriveCancel(ctx, d.ID, principalFrom(ctx).Name)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	s.log.InfoContext(ctx, "re-drive cancelled", "redrive_id", d.ID, "applied", d.Applied, "total", d.Total)
	return &fulfillmentv1.CancelRedriveResponse{Redrive: redriveToProto(d)}, nil
}

// redriveLoop applies running runs, a batch at a time, until ctx ends:
// at once when a run starts here, within redrivePoll otherwise. A batch
// that fails is retried at the next poll (it was one transaction).
func (s *Service) redriveLoop(ctx context.Context) error {
	t := time.NewTicker(redrivePoll)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			found, err := s.redrive.RedriveStep(ctx, redriveBatch)
			if err != nil {
				switch {
				case ctx.Err() != nil:
				case errors.Is(err, fulfillment.ErrUnavailable):
					s.log.DebugContext(ctx, "re-drive: applying a batch", "error", err) // the store says so, once
				default:
					s.log.WarnContext(ctx, "re-drive: applying a batch", "error", err)
				}
				break
			}
			if !found {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.redriveWake:
		}
	}
}
