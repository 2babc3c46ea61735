package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// providerTimeout bounds each call to a payment provider; a start is
// marked busy for twice as long, so that a call that died mid-way leaves
// the attempt to the next call soon after.
const providerTimeout = 15 * time.Second

// recordTimeout bounds recording what the provider answered.
const recordTimeout = 10 * time.Second

// StartPayment implements fulfillmentv1.FulfillmentServiceServer.
func (s *Service) StartPayment(ctx context.Context, req *fulfillmentv1.StartPaymentRequest) (*fulfillmentv1.StartPaymentResponse, error) {
	p := principalFrom(ctx)
	r := fulfillment.StartRequest{
		OrderID: req.GetOrderId(), EndpointID: req.GetEndpointId(), NewAttempt: req.GetNewAttempt(),
		ReplaceAttempt: int(req.GetReplaceAttempt()),
		Description:    req.GetDescription(), VisibleOrgs: p.VisibleOrgs(), Busy: 2 * providerTimeout,
	}
	if err := r.Validate(); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	ep, known := s.endpoints[r.EndpointID]
	prov := s.payments[r.EndpointID]
	switch {
	case !known || !p.AllowsOrg(ep.OrgID):
		// An endpoint of an org the caller may not act for is answered
		// as one that does not exist: which endpoints and providers
		// other orgs have stays unsaid.
		return nil, status.Errorf(codes.InvalidArgument, "endpoint_id: %q is not a configured endpoint", r.EndpointID)
	case prov == nil:
		return nil, status.Errorf(codes.FailedPrecondition, "endpoint %q (%s) does not take payments started by this service", ep.ID, ep.Provider)
	}
	order, err := s.store.OrderGet(ctx, r.OrderID)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if err := requireVisible(p, order.OrgID, fulfillment.ErrOrderNotFound); err != nil {
		return nil, err
	}
	if order.OrgID != ep.OrgID || order.Environment != ep.Environment {
		// (Whose the endpoint is stays unsaid: the caller may not see
		// that org.)
		return nil, status.Errorf(codes.FailedPrecondition, "endpoint %q does not take payments of org %s (%s), the order's: "+
			"start them with an endpoint of that org and environment", ep.ID, order.OrgID, order.Environment)
	}
	if total := order.Total(); total.Currency != prov.Currency() {
		return nil, status.Errorf(codes.FailedPrecondition, "endpoint %q takes %s; the order's total is in %s", ep.ID, prov.Currency(), total.Currency)
	}
	// The customer comes from the order, which never changes: every ask
	// about an attempt names the same one.
	customer := order.SubscriptionCustomer()
	if err := prov.CheckStart(fulfillment.ProviderStart{Amount: order.Total(), CustomerRef: customer}); err != nil {
		// Refused before anything is registered: no attempt is used up.
		return nil, status.Errorf(codes.FailedPrecondition, "endpoint %q cannot start this order's payment: %v", ep.ID, err)
	}
	r.Provider = ep.Provider

	start, ask, err := s.payStore.StartBegin(ctx, r)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if ask {
		outcome, err := s.askProvider(ctx, prov, start, customer)
		// What the provider said is recorded even if the caller left.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
		if own, ok := errors.AsType[ownRecordsError](err); ok {
			// The provider answered; the service's own records failed
			// while the answer was checked against them. The attempt stays
			// starting, asked about again by the next call; the database's
			// error is told as any other, its text neither shown nor kept.
			if rerr := s.payStore.StartRelease(rctx, start.ID, "the provider's answer could not be checked against the service's records"); rerr != nil {
				s.log.WarnContext(ctx, "recording an unchecked answer", "start", start.ID, "error", rerr)
			}
			return nil, toStatus(ctx, s.log, own.error)
		}
		if err != nil {
			// The provider may have created the payment: the attempt stays
			// starting, and the next call asks again under the same id.
			s.log.WarnContext(ctx, "payment provider did not answer", "endpoint", ep.ID, "start", start.ID, "error", err)
			why := ingest.DescribeFailure(err)
			if rerr := s.payStore.StartRelease(rctx, start.ID, "no answer from the provider: "+why); rerr != nil {
				s.log.WarnContext(ctx, "recording the provider's silence", "start", start.ID, "error", rerr)
			}
			return nil, status.Errorf(codes.Unavailable, "the payment provider did not answer (%s): retry; the attempt is asked about again under the same id", why)
		}
		if start, err = s.payStore.StartFinish(rctx, start.ID, outcome); err != nil {
			return nil, toStatus(ctx, s.log, err)
		}
	}
	return &fulfillmentv1.StartPaymentResponse{Payment: paymentStartToProto(start)}, nil
}

// askProvider asks prov to create start's payment, for the order's
// customer (ProviderStart.CustomerRef), and says how the start ends; an
// error means the provider did not answer (it may have acted).
func (s *Service) askProvider(ctx context.Context, prov fulfillment.PaymentProvider, start fulfillment.PaymentStart, customer string) (fulfillment.StartOutcome, error) {
	ctx, cancel := context.WithTimeout(ctx, providerTimeout)
	defer cancel()
	payment, err := prov.StartPayment(ctx, fulfillment.ProviderStart{
		ProviderOrderID: start.ProviderOrderID, Amount: start.Amount, Description: start.Description, CustomerRef: customer,
	})
	var refusal *fulfillment.ProviderRefusal
	switch {
	case err == nil:
		return fulfillment.StartOutcome{State: fulfillment.StartStarted, PaymentID: payment.PaymentID, PaymentURL: payment.URL}, nil
	case !errors.As(err, &refusal):
		return fulfillment.StartOutcome{}, err
	case !refusal.Duplicate:
		return fulfillment.StartOutcome{State: fulfillment.StartFailed, Detail: refusal.Error()}, nil
	}
	if start.Asks > 1 {
		// Asked before, and that answer was lost: the payment the provider
		// holds is most likely this attempt's own. Link it if it provably
		// is, whatever the policy, which is for ids used by others.
		return s.reuse(ctx, prov, start, refusal)
	}
	switch prov.DuplicatePolicy() {
	case fulfillment.PolicyIgnore:
		return review(refusal.Error() + "; left for a person (duplicate order policy ignore)"), nil
	case fulfillment.PolicyReuse:
		return s.reuse(ctx, prov, start, refusal)
	default:
		return fulfillment.StartOutcome{State: fulfillment.StartFailed,
			Detail: refusal.Error() + ": the id was used before, a defect of its generation (duplicate order policy fail)"}, nil
	}
}

// ownRecordsError is a failure of the service's own store met while the
// provider's answer was checked, which askProvider's caller must not tell
// as the provider's.
type ownRecordsError struct{ error }

func (e ownRecordsError) Unwrap() error { return e.error }

// reuse links the provider's existing payment under start's id when it is
// provably start's own (fulfillment.SameAttempt), and leaves the start for
// review otherwise.
func (s *Service) reuse(ctx context.Context, prov fulfillment.PaymentProvider, start fulfillment.PaymentStart, refusal *fulfillment.ProviderRefusal) (fulfillment.StartOutcome, error) {
	id := refusal.PaymentID
	if id == "" {
		var err error
		if id, err = s.payStore.StartKnownPaymentID(ctx, start); err != nil {
			return fulfillment.StartOutcome{}, ownRecordsError{err}
		}
	}
	if id == "" {
		return review(refusal.Error() + "; neither the answer nor any notification names that payment, so it cannot be checked"), nil
	}
	existing, err := prov.PaymentState(ctx, id)
	var refused *fulfillment.ProviderRefusal
	switch {
	case errors.As(err, &refused):
		return review(fmt.Sprintf("%s; asking for payment %s's state: %v", refusal.Error(), id, refused)), nil
	case err != nil:
		return fulfillment.StartOutcome{}, err
	}
	if err := fulfillment.SameAttempt(start, prov.Account(), existing); err != nil {
		return review(fmt.Sprintf("%s; %v", refusal.Error(), err)), nil
	}
	if existing.Ended {
		// This attempt's own payment, and it can no longer be paid: the
		// next call starts a new attempt.
		return fulfillment.StartOutcome{State: fulfillment.StartFailed, PaymentID: id,
			Detail: fmt.Sprintf("the provider's payment %s for this attempt is %s: it can no longer be paid", id, existing.Status)}, nil
	}
	detail := "the provider already had this attempt's payment: linked"
	if existing.URL == "" {
		detail += "; the provider gives no payment page for an existing payment: start a new attempt (new_attempt) if the payer needs one"
	}
	return fulfillment.StartOutcome{State: fulfillment.StartStarted, PaymentID: id, PaymentURL: existing.URL, Detail: detail}, nil
}

func review(detail string) fulfillment.StartOutcome {
	return fulfillment.StartOutcome{State: fulfillment.StartReview, Detail: detail}
}

func paymentStartToProto(s fulfillment.PaymentStart) *fulfillmentv1.PaymentStart {
	return &fulfillmentv1.PaymentStart{
		OrderId: s.OrderID, EndpointId: s.EndpointID, Attempt: int32(s.Attempt), //nolint:gosec // at most MaxPaymentStarts
		ProviderOrderId: s.ProviderOrderID, State: string(s.State),
		Amount:    &fulfillmentv1.Money{Currency: s.Amount.Currency, MinorUnits: s.Amount.MinorUnits},
		PaymentId: s.PaymentID, PaymentUrl: s.PaymentURL, Detail: s.Detail, PaymentState: string(s.PaymentState),
		CreateTime: timestamppb.New(s.CreatedAt), UpdateTime: timestamppb.New(s.UpdatedAt),
	}
}
