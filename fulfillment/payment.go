package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Payments the service starts at a provider (StartPayment): the service
// registers each attempt under an id of its own, the provider order id,
// before it asks the provider for a payment page, so that an answer lost to
// a timeout or a crash is found again under the same id.

// StartState is where a payment start is.
type StartState string

// Payment start states.
const (
	// StartStarting: the provider is being asked, or was asked and its
	// answer was lost; the next call asks again under the same id.
	StartStarting StartState = "starting"
	// StartStarted: the provider created the payment; the payer may pay.
	StartStarted StartState = "started"
	// StartFailed: the provider refused; a new attempt may be started.
	StartFailed StartState = "failed"
	// StartReview: the provider already had a payment under the attempt's
	// id that could not be linked; a person decides (a
	// duplicate_order_id item).
	StartReview StartState = "pending_review"
)

// MaxPaymentStarts bounds the attempts started for one order.
const MaxPaymentStarts = 20

// PaymentStart is one attempt to pay an order that the service started at
// a provider.
type PaymentStart struct {
	ID          int64
	OrderID     string
	OrgID       string
	Environment Environment
	EndpointID  string
	Provider    Provider
	// Attempt numbers the order's starts from 1.
	Attempt int
	// ProviderOrderID is the attempt's id at the provider (T-Bank's
	// OrderId): ProviderOrderID(OrderID, Attempt).
	ProviderOrderID string
	State           StartState
	// Amount is what the payer is asked for: the order's total.
	Amount      Money
	Description string
	// PaymentID and PaymentURL are the provider's payment and its page,
	// once known.
	PaymentID  string
	PaymentURL string
	// Detail says why a start failed or waits for review.
	Detail string
	// BusyUntil: a call is asking the provider until then.
	BusyUntil time.Time
	// Asks counts the calls that asked the provider about it: more than
	// one, and an earlier answer was lost (the provider may have acted).
	Asks int
	// PaymentState is what became of the provider's payment, as the
	// order's payment attempt of PaymentID records it (confirmed,
	// expired…); "" while none is recorded. State says how the start
	// itself ended and stays "started" once the provider created the
	// payment: whether the payer paid is this. Only an order's detail
	// (OrderDetail) reads it.
	PaymentState AttemptState
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// ProviderOrderID is the id under which attempt n of an order is known at
// its provider: the order id's 32 hex digits, a dash and n. It is the same
// for every call about the attempt and new for each attempt, and it tells
// nothing about the payer.
func ProviderOrderID(orderID string, attempt int) string {
	return strings.ReplaceAll(orderID, "-", "") + "-" + strconv.Itoa(attempt)
}

// StartRequest asks for a payment start of an order.
type StartRequest struct {
	OrderID    string
	EndpointID string
	Provider   Provider
	// NewAttempt starts another attempt even when the latest one is
	// started or waits for review (say, its page expired).
	NewAttempt bool
	// ReplaceAttempt, with NewAttempt, is the attempt being replaced: when
	// a later one exists (a retried call), it is returned instead.
	ReplaceAttempt int
	Description    string
	// VisibleOrgs restricts the order to these orgs; nil means any.
	VisibleOrgs []string
	// Busy is how long the caller may take asking the provider.
	Busy time.Duration
}

// Validate checks the caller's fields of a start request.
func (r StartRequest) Validate() error {
	var vs violations
	if err := ValidateOrderID("order_id", r.OrderID); err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			vs = append(vs, ve.Violations...)
		}
	}
	if !ConfigIDPattern.MatchString(r.EndpointID) {
		vs.add("endpoint_id", "must be the id of a configured endpoint whose provider takes payments")
	}
	if r.Description != "" {
		if err := RuleDescription.Check(r.Description); err != nil {
			vs.add("description", "%v", err)
		}
	}
	return vs.err()
}

// ErrStartBusy means another call is asking the provider about the
// order's latest attempt right now.
var ErrStartBusy = errors.New("a payment start of this order is being asked for by another call")

// StartStep is what a StartPayment call does about the order's latest
// attempt.
type StartStep int

// Start steps.
const (
	// StepAsk asks the provider (again) under the latest attempt's id.
	StepAsk StartStep = iota
	// StepNew creates attempt latest+1 and asks the provider.
	StepNew
	// StepReturn returns the latest attempt as it is.
	StepReturn
)

// NextStart decides what a call does given the order's latest start
// (nil: none yet), whether it asks for a new attempt (replacing attempt
// replace, when not 0), and the time. A busy
// latest start is ErrStartBusy; a new attempt past MaxPaymentStarts is
// ErrFailedPrecondition.
func NextStart(latest *PaymentStart, newAttempt bool, replace int, now time.Time) (StartStep, error) {
	if latest == nil {
		return StepNew, nil
	}
	if newAttempt && replace > 0 && latest.Attempt > replace {
		newAttempt = false // replaced already, by the call this one retries
	}
	if latest.State == StartStarting {
		if now.Before(latest.BusyUntil) {
			return 0, ErrStartBusy
		}
		return StepAsk, nil // its answer was lost: ask again, same id
	}
	if latest.State == StartFailed || newAttempt {
		if latest.Attempt >= MaxPaymentStarts {
			return 0, fmt.Errorf("%w: the order already has %d payment attempts", ErrFailedPrecondition, MaxPaymentStarts)
		}
		return StepNew, nil
	}
	return StepReturn, nil
}

// DuplicateOrderPolicy says what to do when a provider answers a start
// with "this order id already exists".
type DuplicateOrderPolicy string

// Duplicate order id policies.
const (
	// PolicyFail fails the start: a repeated id is a defect of its
	// generation.
	PolicyFail DuplicateOrderPolicy = "fail"
	// PolicyIgnore leaves the start for a person, with an item.
	PolicyIgnore DuplicateOrderPolicy = "ignore"
	// PolicyReuse links the provider's existing payment when it is provably
	// this attempt's (SameAttempt); otherwise as PolicyIgnore.
	PolicyReuse DuplicateOrderPolicy = "reuse"
)

// ProviderPayment is a payment as its provider reports it.
type ProviderPayment struct {
	// Account is the merchant account at the provider (a T-Bank terminal).
	Account         string
	ProviderOrderID string
	PaymentID       string
	// Status is the provider's own status word.
	Status string
	Amount Money
	// URL is the payment page, when the answer has one.
	URL string
	// Ended: the payment can no longer be paid (declined, cancelled,
	// expired, reversed or refunded).
	Ended bool
	// Held: the payer's money is authorized and held, waiting to be taken
	// (a two-stage payment not yet confirmed). A payment the service
	// started should pass through this on its way to being paid; one the
	// provider still reports held when polling stops needs a person.
	Held bool
}

// ProviderStart is what a provider is asked to create.
type ProviderStart struct {
	ProviderOrderID string
	Amount          Money
	Description     string
	// CustomerRef is the customer of the order's subscription line, ""
	// for an order without one (OrderSpec.SubscriptionCustomer). A
	// provider that binds the payer's card for the merchant's recurrent
	// charges keys the binding by it. It comes from the order, which never
	// changes, so every ask about one attempt carries the same.
	CustomerRef string
}

// PaymentProvider is a provider's API for payments the service starts
// and for their state.
type PaymentProvider interface {
	// CheckStart says why the provider could never take p, as far as it
	// can tell before anything is registered or sent (a customer
	// reference its API cannot carry), or returns nil. Its error is for
	// the caller to act on and quotes none of p's values.
	CheckStart(p ProviderStart) error
	// StartPayment asks the provider to create a payment. A refusal is a
	// *ProviderRefusal; any other error means the request may or may not
	// have reached the provider.
	StartPayment(ctx context.Context, p ProviderStart) (ProviderPayment, error)
	// PaymentState reports a payment's state at the provider.
	PaymentState(ctx context.Context, paymentID string) (ProviderPayment, error)
	// Account is the merchant account the provider is used with.
	Account() string
	// Currency is the one currency the provider takes (its minor units).
	Currency() string
	// DuplicatePolicy is the endpoint's duplicate order id policy.
	DuplicatePolicy() DuplicateOrderPolicy
}

// ProviderRefusal is a provider's answer that it did not do what it was
// asked: nothing happened there (but for a duplicate, whose payment exists
// already).
type ProviderRefusal struct {
	Code, Message string
	// Duplicate: the provider already has a payment under the order id;
	// PaymentID names it when the answer does.
	Duplicate bool
	PaymentID string
}

func (r *ProviderRefusal) Error() string {
	if r.Duplicate {
		return fmt.Sprintf("the provider already has a payment under this order id (code %s)", r.Code)
	}
	return fmt.Sprintf("the provider refused (code %s): %s", r.Code, r.Message)
}

// SameAttempt says why existing, the payment the provider holds under s's
// provider order id, is not provably s's own — its merchant account,
// order id or amount differ — or returns nil when it is. The order id
// names the order and the attempt, so it stands for the payment's owner
// and purpose.
func SameAttempt(s PaymentStart, account string, existing ProviderPayment) error {
	var diffs []string
	if existing.Account != account {
		diffs = append(diffs, fmt.Sprintf("account %q, not %q", existing.Account, account))
	}
	if existing.ProviderOrderID != s.ProviderOrderID {
		diffs = append(diffs, fmt.Sprintf("order id %q, not %q", existing.ProviderOrderID, s.ProviderOrderID))
	}
	if existing.Amount != s.Amount {
		diffs = append(diffs, fmt.Sprintf("amount %d %s, not %d %s", existing.Amount.MinorUnits, existing.Amount.Currency, s.Amount.MinorUnits, s.Amount.Currency))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("the provider's payment %s differs: %s", existing.PaymentID, strings.Join(diffs, "; "))
	}
	return nil
}

// StartOutcome is how a start ends: its new state and what the provider
// said.
type StartOutcome struct {
	State      StartState
	PaymentID  string
	PaymentURL string
	Detail     string
}

// PaymentStore keeps payment starts.
type PaymentStore interface {
	// StartBegin applies NextStart to the order of r under a lock: it
	// returns the start to ask the provider about, marked busy for r.Busy
	// (ask = true), or the latest start as it is (ask = false). The order
	// must await payment (else ErrFailedPrecondition); an order not found
	// or not visible is ErrNotFound.
	StartBegin(ctx context.Context, r StartRequest) (s PaymentStart, ask bool, err error)
	// StartFinish records the outcome of a start that was asked about
	// (still starting): a started one's payment becomes an attempt of the
	// order; one left for review opens a duplicate_order_id item.
	StartFinish(ctx context.Context, id int64, o StartOutcome) (PaymentStart, error)
	// StartRelease ends the busy mark of a start whose provider did not
	// answer, keeping detail.
	StartRelease(ctx context.Context, id int64, detail string) error
	// StartKnownPaymentID returns the payment id of the latest provider
	// event about s's provider order id, or "".
	StartKnownPaymentID(ctx context.Context, s PaymentStart) (string, error)
}

// PollWork is the storage of the status poller: the payments the service
// started, as a leased queue — each due for a poll until its outcome is
// known, polled again with backoff while it is not.
type PollWork interface {
	// PollLoad returns the start a claimed poll is about, and whether the
	// outcome of its payment is known already (its attempt confirmed or
	// ended, by a notification or an earlier poll); a lease-lost error
	// (worker.ErrLeaseLost) when owner no longer holds the poll.
	PollLoad(ctx context.Context, id int64, owner string) (s PaymentStart, known bool, err error)
	// PollRecord stores a.Event, what the provider answered, in the inbox
	// — unless an event with its id is there already — records that the
	// provider answered this attempt and whether the answer said the
	// money is held (when the event has an id), and completes the poll
	// when done, in one transaction; a lease-lost error when owner no
	// longer holds the poll.
	PollRecord(ctx context.Context, id int64, owner string, a PollAnswer, done bool) error
}

// PollAnswer is a provider's answer to a status poll, as the poller
// records it. The zero PollAnswer records no answer.
type PollAnswer struct {
	// Event is what the answer stands for (StatePoller.PolledEvent), and
	// Raw its evidence.
	Event ProviderEvent
	Raw   []byte
	// Held is the provider's status word when the answer says the payer's
	// money is held (ProviderPayment.Held); empty when it does not.
	Held string
}

// StatePoller is a PaymentProvider whose state answers can be told as
// provider events: what the status poller feeds into the inbox.
type StatePoller interface {
	PaymentProvider
	// PolledEvent is the event that p, an answer of PaymentState, stands
	// for: with an event id of its own (never a notification's), its raw
	// evidence, and final true when the payment's outcome is settled
	// (confirmed or ended) and polling may stop.
	PolledEvent(p ProviderPayment) (ev ProviderEvent, raw []byte, final bool, err error)
}
