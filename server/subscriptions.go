package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/providers"
)

// Customer references may carry personal data: nothing here logs one, and
// no error message quotes one.

// CreateSubscription implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) CreateSubscription(ctx context.Context, req *fulfillmentv1.CreateSubscriptionRequest) (*fulfillmentv1.CreateSubscriptionResponse, error) {
	ref, err := s.subscriptionRef(req)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if err := requireOrg(principalFrom(ctx), ref.OrgID); err != nil {
		return nil, err
	}
	rec, created, err := s.subs.SubscriptionCreate(ctx, ref)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &fulfillmentv1.CreateSubscriptionResponse{Subscription: subscriptionToProto(rec), Created: created}, nil
}

// GetSubscription implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) GetSubscription(ctx context.Context, req *fulfillmentv1.GetSubscriptionRequest) (*fulfillmentv1.GetSubscriptionResponse, error) {
	if err := validateSubscriptionID("subscription_id", req.GetSubscriptionId()); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	d, err := s.subs.SubscriptionGet(ctx, req.GetSubscriptionId())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if err := requireVisible(principalFrom(ctx), d.OrgID, fulfillment.ErrSubscriptionNotFound); err != nil {
		return nil, err
	}
	resp := &fulfillmentv1.GetSubscriptionResponse{
		Subscription:   subscriptionToProto(d.SubscriptionRecord),
		Periods:        make([]*fulfillmentv1.PaidPeriod, 0, len(d.Periods)),
		OmittedPeriods: int32(d.Omitted),
	}
	for _, p := range d.Periods {
		resp.Periods = append(resp.Periods, &fulfillmentv1.PaidPeriod{
			Period:     int32(p.Period),
			StartTime:  timestamppb.New(p.Start),
			EndTime:    timestamppb.New(p.End),
			Bill:       p.Bill,
			PaymentId:  p.PaymentID,
			CreateTime: timestamppb.New(p.CreatedAt),
			RefundTime: optTime(p.RefundedAt),
		})
	}
	if plan, ok := s.plans[d.PlanID]; ok {
		now := time.Now()
		a := d.AccessAt(now, plan)
		resp.Access = &fulfillmentv1.Access{HasAccess: a.Granted, Until: optTime(a.Until), Reason: a.Why, CheckTime: timestamppb.New(now)}
	}
	return resp, nil
}

// ListSubscriptions implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) ListSubscriptions(ctx context.Context, req *fulfillmentv1.ListSubscriptionsRequest) (*fulfillmentv1.ListSubscriptionsResponse, error) {
	p := principalFrom(ctx)
	filter := fulfillment.SubscriptionFilter{
		VisibleOrgs: p.VisibleOrgs(),
		OrgID:       req.GetOrgId(),
		Environment: fulfillment.Environment(req.GetEnvironment()),
		CustomerRef: req.GetCustomerRef(),
		PlanID:      req.GetPlanId(),
		State:       fulfillment.SubscriptionState(req.GetState()),
	}
	pg, err := s.listing(ctx, p, validateSubscriptionFilter(filter), filter.OrgID, req,
		filter.OrgID, string(filter.Environment), filter.CustomerRef, filter.PlanID, string(filter.State), filter.VisibleOrgs)
	if err != nil {
		return nil, err
	}
	if pg.before != "" && validateSubscriptionID("page_token", pg.before) != nil {
		return nil, toStatus(ctx, s.log, badPageToken())
	}
	fetch := func(before string, limit int) ([]fulfillment.SubscriptionRecord, error) {
		return s.subs.SubscriptionList(ctx, filter, before, limit)
	}
	resp := &fulfillmentv1.ListSubscriptionsResponse{}
	resp.Subscriptions, resp.NextPageToken, err = fillPage(pg, fetch, subscriptionToProto,
		func(r fulfillment.SubscriptionRecord) string { return r.ID })
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return resp, nil
}

// CheckAccess implements fulfillmentv1.FulfillmentServiceServer: one
// indexed read of the customer's subscriptions to the plan, then the rules.
func (s *Service) CheckAccess(ctx context.Context, req *fulfillmentv1.CheckAccessRequest) (*fulfillmentv1.CheckAccessResponse, error) {
	env := fulfillment.Environment(req.GetEnvironment())
	if env == "" {
		env = fulfillment.EnvLive
	}
	var vs []fulfillment.FieldViolation
	vs = appendViolations(vs, fulfillment.ValidateOrgID("org_id", req.GetOrgId()))
	if !env.Valid() {
		vs = append(vs, fulfillment.FieldViolation{Field: "environment", Description: fmt.Sprintf("must be %q or %q (empty: %q)", fulfillment.EnvLive, fulfillment.EnvTest, fulfillment.EnvLive)})
	}
	vs = checkRef(vs, "customer_ref", req.GetCustomerRef(), true)
	plan, ok := s.plans[req.GetPlanId()]
	if !ok {
		vs = planViolation(vs, "plan_id", req.GetPlanId())
	}
	if len(vs) > 0 {
		return nil, toStatus(ctx, s.log, &fulfillment.ValidationError{Violations: vs})
	}
	if err := requireOrg(principalFrom(ctx), req.GetOrgId()); err != nil {
		return nil, err
	}
	subs, err := s.subs.SubscriptionsOf(ctx, req.GetOrgId(), env, req.GetCustomerRef(), plan.ID)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	now := time.Now()
	a, id := fulfillment.CheckAccess(subs, plan, now)
	return &fulfillmentv1.CheckAccessResponse{HasAccess: a.Granted, Until: optTime(a.Until), Reason: a.Why,
		SubscriptionId: id, CheckTime: timestamppb.New(now)}, nil
}

// subscriptionRef reads and checks a CreateSubscriptionRequest.
func (s *Service) subscriptionRef(req *fulfillmentv1.CreateSubscriptionRequest) (fulfillment.SubscriptionRef, error) {
	ref := fulfillment.SubscriptionRef{
		OrgID:                  req.GetOrgId(),
		Environment:            fulfillment.Environment(req.GetEnvironment()),
		Provider:               fulfillment.Provider(req.GetProvider()),
		ProviderSubscriptionID: req.GetProviderSubscriptionId(),
		CustomerRef:            req.GetCustomerRef(),
		PlanID:                 req.GetPlanId(),
	}
	var vs []fulfillment.FieldViolation
	vs = appendViolations(vs, fulfillment.ValidateOrgID("org_id", ref.OrgID))
	if !ref.Environment.Valid() {
		vs = append(vs, fulfillment.FieldViolation{Field: "environment", Description: fmt.Sprintf("must be %q or %q", fulfillment.EnvLive, fulfillment.EnvTest)})
	}
	if names := providers.Names(); !slices.Contains(names, string(ref.Provider)) {
		vs = append(vs, fulfillment.FieldViolation{Field: "provider", Description: "must be one of " + strings.Join(names, ", ")})
	}
	vs = checkRef(vs, "provider_subscription_id", ref.ProviderSubscriptionID, true)
	vs = checkRef(vs, "customer_ref", ref.CustomerRef, true)
	if _, ok := s.plans[ref.PlanID]; !ok {
		vs = planViolation(vs, "plan_id", ref.PlanID)
	}
	if len(vs) > 0 {
		return ref, &fulfillment.ValidationError{Violations: vs}
	}
	return ref, nil
}

// planConfigured reports whether id names a configured plan.
func (s *Service) planConfigured(id string) bool {
	_, ok := s.plans[id]
	return ok
}

// planViolation adds the violation of field, plan id v, which is not a
// configured plan.
func planViolation(vs []fulfillment.FieldViolation, field, v string) []fulfillment.FieldViolation {
	desc := fmt.Sprintf("%q is not a configured plan", v)
	switch {
	case v == "":
		desc = "is required: the id of a configured plan"
	case !fulfillment.ConfigIDPattern.MatchString(v):
		desc = "must be a configured plan id: lowercase letters, digits, _ and -, at most 64 characters"
	}
	return append(vs, fulfillment.FieldViolation{Field: field, Description: desc})
}

// validateSubscriptionFilter checks the request-supplied filter values. A
// plan need not be configured still: its subscriptions remain.
func validateSubscriptionFilter(f fulfillment.SubscriptionFilter) error {
	var vs []fulfillment.FieldViolation
	if f.OrgID != "" {
		vs = appendViolations(vs, fulfillment.ValidateOrgID("org_id", f.OrgID))
	}
	if f.Environment != "" && !f.Environment.Valid() {
		vs = append(vs, fulfillment.FieldViolation{Field: "environment", Description: fmt.Sprintf("must be %q or %q", fulfillment.EnvLive, fulfillment.EnvTest)})
	}
	vs = checkRef(vs, "customer_ref", f.CustomerRef, false)
	if f.PlanID != "" && !fulfillment.ConfigIDPattern.MatchString(f.PlanID) {
		vs = append(vs, fulfillment.FieldViolation{Field: "plan_id", Description: "must be a plan id: lowercase letters, digits, _ and -, at most 64 characters"})
	}
	switch f.State {
	case "", fulfillment.SubActive, fulfillment.SubPastDue, fulfillment.SubCancelled, fulfillment.SubExpired:
	default:
		vs = append(vs, fulfillment.FieldViolation{Field: "state", Description: fmt.Sprintf("must be %q, %q, %q or %q",
			fulfillment.SubActive, fulfillment.SubPastDue, fulfillment.SubCancelled, fulfillment.SubExpired)})
	}
	if len(vs) > 0 {
		return &fulfillment.ValidationError{Violations: vs}
	}
	return nil
}

// checkRef adds a violation when v, a reference field, is missing
// (required) or breaks fulfillment.RuleRef or starts or ends with a space,
// as order references are checked. The description never quotes v.
func checkRef(vs []fulfillment.FieldViolation, field, v string, required bool) []fulfillment.FieldViolation {
	if v == "" {
		if required {
			vs = append(vs, fulfillment.FieldViolation{Field: field, Description: "is required"})
		}
		return vs
	}
	if err := fulfillment.RuleRef.Check(v); err != nil {
		return append(vs, fulfillment.FieldViolation{Field: field, Description: err.Error()})
	}
	first, _ := utf8.DecodeRuneInString(v)
	last, _ := utf8.DecodeLastRuneInString(v)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		vs = append(vs, fulfillment.FieldViolation{Field: field, Description: "must not start or end with a space"})
	}
	return vs
}

// validateSubscriptionID checks that id has the form of a subscription id.
func validateSubscriptionID(field, id string) error {
	desc := ""
	if id == "" {
		desc = "is required"
	} else if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		desc = "must be a subscription id such as 019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b"
	}
	if desc != "" {
		return &fulfillment.ValidationError{Violations: []fulfillment.FieldViolation{{Field: field, Description: desc}}}
	}
	return nil
}

// appendViolations adds the violations of err, a *ValidationError or nil.
func appendViolations(vs []fulfillment.FieldViolation, err error) []fulfillment.FieldViolation {
	if ve, ok := errors.AsType[*fulfillment.ValidationError](err); ok {
		return append(vs, ve.Violations...)
	}
	return vs
}

// joinViolations is one *ValidationError with the violations of errs (each
// a *ValidationError or nil), or nil when none has any.
func joinViolations(errs ...error) error {
	var vs []fulfillment.FieldViolation
	for _, err := range errs {
		vs = appendViolations(vs, err)
	}
	if len(vs) == 0 {
		return nil
	}
	return &fulfillment.ValidationError{Violations: vs}
}

// subscriptionToProto renders a subscription for a caller.
func subscriptionToProto(r fulfillment.SubscriptionRecord) *fulfillmentv1.Subscription {
	pb := &fulfillmentv1.Subscription{
		Id:                     r.ID,
		OrgId:                  r.OrgID,
		Environment:            string(r.Environment),
		Provider:               string(r.Provider),
		ProviderSubscriptionId: r.ProviderSubscriptionID,
		CustomerRef:            r.CustomerRef,
		PlanId:                 r.PlanID,
		State:                  string(r.State),
		Periods:                int32(r.Periods),
		CurrentPeriodStartTime: optTime(r.PeriodStart),
		CurrentPeriodEndTime:   optTime(r.PeriodEnd),
		CreateTime:             timestamppb.New(r.CreatedAt),
		UpdateTime:             timestamppb.New(r.UpdatedAt),
	}
	if r.AccessEndedAt != nil {
		pb.AccessEndTime = timestamppb.New(*r.AccessEndedAt)
	}
	return pb
}

// optTime is t, or nil (absent) for the zero time.
func optTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
