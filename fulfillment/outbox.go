package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Topic names what an outbox message announces; it is the "type" of the
// message's body.
type Topic string

// Topics.
const (
	// TopicFulfillmentRequested asks a line's destination to fulfil an
	// external line of a paid order.
	TopicFulfillmentRequested Topic = "fulfillment.requested"
	// TopicOrderFulfilled: every line of the order is fulfilled.
	TopicOrderFulfilled Topic = "order.fulfilled"
	// TopicOrderRefunded: the order's payment was refunded in full.
	TopicOrderRefunded Topic = "order.refunded"
	// TopicOrderOnHold: the order waits for a person (an amount mismatch,
	// a payment after expiry).
	TopicOrderOnHold Topic = "order.on_hold"
)

// OrderTopics are the order events a destination may subscribe to.
var OrderTopics = []Topic{TopicOrderFulfilled, TopicOrderRefunded, TopicOrderOnHold}

// EventTopics are all the events a destination may subscribe to: the
// order events and the subscription events.
var EventTopics = []Topic{TopicOrderFulfilled, TopicOrderRefunded, TopicOrderOnHold,
	TopicSubscriptionRenewed, TopicSubscriptionPastDue, TopicSubscriptionAccessEnded}

// TopicState is the state an order event announces, the inverse of
// StateTopic: "" for a topic that announces no order state.
func TopicState(t Topic) State {
	switch t {
	case TopicOrderFulfilled:
		return StateFulfilled
	case TopicOrderRefunded:
		return StateRefunded
	case TopicOrderOnHold:
		return StateOnHold
	default:
		return ""
	}
}

// StateTopic is the order event announcing that an order entered state s,
// or "" when entering s is not announced.
func StateTopic(s State) Topic {
	switch s {
	case StateFulfilled:
		return TopicOrderFulfilled
	case StateRefunded:
		return TopicOrderRefunded
	case StateOnHold:
		return TopicOrderOnHold
	default:
		return ""
	}
}

// Idempotency keys of outbox messages. A key names what the message is
// about — an order's line to fulfil, or an order event — so that it is the
// same however often, and by whichever replica, the message is produced:
// storage fills the formats in (in Go and in SQL alike) with the order id
// and the line number or topic.
const (
	// LineKeyFormat: the fulfillment request of an order's external line.
	LineKeyFormat = "order_%s_line_%s_fulfill"
	// EventKeyFormat: an order event.
	EventKeyFormat = "order_%s_%s"
	// SubscriptionEventKeyFormat: a subscription event of one period.
	SubscriptionEventKeyFormat = "subscription_%s_%s_%s"
)

// LineKey is the idempotency key of the fulfillment request of line lineNo
// (from 0) of the order.
func LineKey(orderID string, lineNo int) string {
	return fmt.Sprintf(LineKeyFormat, orderID, strconv.Itoa(lineNo))
}

// EventKey is the idempotency key of the order event topic of the order.
func EventKey(orderID string, topic Topic) string {
	return fmt.Sprintf(EventKeyFormat, orderID, topic)
}

// DeliveryState is where an outbox message is.
type DeliveryState string

// Delivery states.
const (
	// DeliveryPending: queued, or waiting for its next attempt.
	DeliveryPending DeliveryState = "pending"
	// DeliveryDelivered: the destination answered 2xx.
	DeliveryDelivered DeliveryState = "delivered"
	// DeliveryFailed: it used the destination's attempts without a 2xx; a
	// failed_delivery item is open.
	DeliveryFailed DeliveryState = "failed"
	// DeliveryUncertain: a destination that does not honour idempotency
	// keys may have received it; it is not sent again unless a person
	// retries it. An uncertain_delivery item is open.
	DeliveryUncertain DeliveryState = "uncertain"
)

// Valid reports whether s is a known delivery state.
func (s DeliveryState) Valid() bool {
	switch s {
	case DeliveryPending, DeliveryDelivered, DeliveryFailed, DeliveryUncertain:
		return true
	}
	return false
}

// DecideDelivered is what the delivery of an order's required message does
// to the order: once none of its external lines awaits delivery
// (undelivered), a fulfilling order is fulfilled and announces it. Any other
// state stays as it is: an order refunded or held meanwhile does not move.
func DecideDelivered(state State, undelivered int) []Effect {
	if state != StateFulfilling || undelivered > 0 {
		return nil
	}
	return enter(StateFulfilled)
}

// enter is the effects of moving an order to state s: the move, the
// fulfillment requests of its external lines when it waits for them, and
// the announcement of s to the destinations subscribed to it.
func enter(s State) []Effect {
	effects := []Effect{MoveOrder{s}}
	if s == StateFulfilling {
		effects = append(effects, RequestDeliveries{})
	}
	if t := StateTopic(s); t != "" {
		effects = append(effects, Publish{t})
	}
	return effects
}

// OutboxMessage is a queued message as its destination receives it.
type OutboxMessage struct {
	ID            int64
	DestinationID string
	Topic         Topic
	// Key is the idempotency key, sent as webhook-id and Idempotency-Key.
	Key     string
	Payload []byte
	// Interrupted: a request for it may have been on the wire when the
	// worker sending it stopped (only recorded for destinations that do
	// not honour idempotency keys).
	Interrupted bool
	// CreatedAt is when the message was queued (the database's clock).
	CreatedAt time.Time
}

// DeliveryOutcome is what one delivery attempt came to.
type DeliveryOutcome string

// Delivery outcomes.
const (
	// OutcomeDelivered: a 2xx answer. The message is delivered.
	OutcomeDelivered DeliveryOutcome = "delivered"
	// OutcomeRetry: it did not arrive, or may be sent again safely.
	OutcomeRetry DeliveryOutcome = "retry"
	// OutcomeUncertain: it may have arrived at a destination that does not
	// honour idempotency keys. The message is uncertain.
	OutcomeUncertain DeliveryOutcome = "uncertain"
	// OutcomeGone: 410 Gone. The destination is disabled; the message
	// waits, its attempt not counted.
	OutcomeGone DeliveryOutcome = "gone"
	// OutcomeInterrupted: the message was found Interrupted, so it was not
	// sent again. The message is uncertain.
	OutcomeInterrupted DeliveryOutcome = "interrupted"
)

// DeliveryAttempt is the record of one attempt at a message.
type DeliveryAttempt struct {
	Outcome DeliveryOutcome
	// Status is the HTTP status answered, 0 when none was.
	Status int
	// Reason says what happened in a few words (never the payload).
	Reason    string
	StartedAt time.Time
	// RetryAfter is how long the destination asked to be left alone
	// (Retry-After) before the message is tried again: its next attempt
	// waits at least that long. Not stored.
	RetryAfter time.Duration
	// Attempt (from 1) and FinishedAt are set by storage when it reads
	// the record back.
	Attempt    int
	FinishedAt time.Time
}

// OutboxWork is the storage of the outbox dispatcher: a leased queue per
// destination.
type OutboxWork interface {
	// OutboxLoad reads the messages of ids that owner still holds, in id
	// order, in one round trip.
	OutboxLoad(ctx context.Context, ids []int64, owner string) ([]OutboxMessage, error)
	// OutboxSending records that a request for the message may be on the
	// wire from now on, until OutboxRecord.
	OutboxSending(ctx context.Context, id int64, owner string) error
	// OutboxRecord records attempts, one per message, and applies their
	// outcomes, all in one transaction: a delivered message fulfils its
	// order when it was the last one the order awaited; an uncertain one
	// opens an uncertain_delivery item; gone disables the destination and
	// puts the message back without counting the attempt; retry changes
	// nothing else (the caller then has the queue retry the message). The messages owner
	// no longer holds are left alone, and returned.
	OutboxRecord(ctx context.Context, owner string, attempts []MessageAttempt) (lost []int64, err error)
	// OutboxDisabled reports whether destination is disabled (by a person,
	// or by its 410).
	OutboxDisabled(ctx context.Context, destination string) (bool, error)
}

// MessageAttempt is an attempt at the outbox message ID.
type MessageAttempt struct {
	ID int64
	DeliveryAttempt
}

// ErrFailedPrecondition means the object is not in a state that allows
// the request (e.g. retrying a delivered message): nothing was changed.
var ErrFailedPrecondition = errors.New("failed precondition")

// Delivery is an outbox message as callers see it.
type Delivery struct {
	ID            int64
	DestinationID string
	Topic         Topic
	Key           string
	OrgID         string
	Environment   Environment
	OrderID       string
	// LineNo is the external line it asks to fulfil; nil for order events.
	LineNo   *int
	Required bool
	State    DeliveryState
	Attempts int
	// NextAttemptAt is set while pending.
	NextAttemptAt *time.Time
	LastStatus    int
	LastError     string
	CreatedAt     time.Time
	ProcessedAt   *time.Time
	// Payload and History (the newest MaxHistoryItems attempts, oldest
	// first; OmittedAttempts older ones left out) are read by DeliveryGet
	// only.
	Payload         []byte
	History         []DeliveryAttempt
	OmittedAttempts int
}

// DeliveryFilter selects outbox messages. Empty fields match everything.
type DeliveryFilter struct {
	// VisibleOrgs restricts the result to these orgs; nil means every org.
	VisibleOrgs   []string
	OrgID         string
	Environment   Environment
	State         DeliveryState
	DestinationID string
	OrderID       string
}

// Validate checks the request-supplied filter values.
func (f DeliveryFilter) Validate() error {
	var vs violations
	if f.OrgID != "" {
		checkOrgID(&vs, "org_id", f.OrgID)
	}
	filterEnvironment(&vs, f.Environment)
	if f.State != "" && !f.State.Valid() {
		vs.add("state", "must be %q, %q, %q or %q", DeliveryPending, DeliveryDelivered, DeliveryFailed, DeliveryUncertain)
	}
	if f.DestinationID != "" {
		checkDestination(&vs, "destination_id", f.DestinationID)
	}
	if f.OrderID != "" {
		if err := ValidateOrderID("order_id", f.OrderID); err != nil {
			return err
		}
	}
	return vs.err()
}

// DeliveryListParams selects one page of messages.
type DeliveryListParams struct {
	Filter DeliveryFilter
	// BeforeID continues a listing after the message with this id.
	BeforeID int64
	Limit    int
}

// DestinationStatus is what storage knows of a destination.
type DestinationStatus struct {
	// DisabledAt is set while it is disabled, with the reason.
	DisabledAt     *time.Time
	DisabledReason string
	// Its messages by state.
	Pending, Failed, Uncertain int64
}

// OutboxStore is what the API reads and changes of the outbox.
type OutboxStore interface {
	// DeliveryList returns up to p.Limit messages matching p.Filter,
	// newest first, without payload and history.
	DeliveryList(ctx context.Context, p DeliveryListParams) ([]Delivery, error)
	// DeliveryGet returns one message with its payload and history, or
	// ErrNotFound.
	DeliveryGet(ctx context.Context, id int64) (Delivery, error)
	// DeliveryRetry makes a message due now under its unchanged key; by
	// names who asked. A failed or uncertain message is pending again with
	// its attempts reset; a pending one not being sent keeps its attempts;
	// a delivered one is pending again with its attempts reset only when
	// resend is set. Anything else is ErrFailedPrecondition and changes
	// nothing.
	DeliveryRetry(ctx context.Context, id int64, by string, resend bool) (Delivery, error)
	// DeliveryConfirm records that a failed or uncertain message reached
	// its destination after all, as a person confirmed with it: nothing is
	// sent; the message is delivered, its order completes when it was the
	// last one awaited, and its open failed_delivery or uncertain_delivery
	// item is resolved as ResolutionConfirmedDelivered, in one
	// transaction. Any other message is ErrFailedPrecondition and nothing
	// changes.
	DeliveryConfirm(ctx context.Context, c DeliveryConfirmation) (Delivery, error)
	// DestinationStatuses returns the status of every destination that
	// has messages or was disabled, by id, its messages counted for orgs
	// only (nil: every org).
	DestinationStatuses(ctx context.Context, orgs []string) (map[string]DestinationStatus, error)
	// DestinationDisable disables a destination (its messages wait); a
	// disabled one keeps its first reason. DestinationEnable enables it.
	DestinationDisable(ctx context.Context, id, reason string) error
	DestinationEnable(ctx context.Context, id string) error
}

// ValidateDestinationID checks that id (required) has the form of a
// destination id.
func ValidateDestinationID(field, id string) error {
	var vs violations
	if id == "" {
		vs.add(field, "is required")
	} else {
		checkDestination(&vs, field, id)
	}
	return vs.err()
}

func checkDestination(vs *violations, field, id string) {
	if !ConfigIDPattern.MatchString(id) {
		vs.add(field, "must be a destination id: lowercase letters, digits, _ and -, at most 64 characters")
	}
}

// ParseMessageID reads an outbox message id: a positive decimal number.
func ParseMessageID(field, id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		var vs violations
		vs.add(field, "must be an outbox message id: a positive decimal number such as \"42\"")
		return 0, vs.err()
	}
	return n, nil
}

// ValidateNote checks a required note a person wrote (RuleNote).
func ValidateNote(field, v string) error {
	var vs violations
	if v == "" {
		vs.add(field, "is required: say why, for whoever looks next")
	} else if err := RuleNote.Check(v); err != nil {
		vs.add(field, "%v", err)
	}
	return vs.err()
}

// SubscriptionEventKey is the idempotency key of the subscription event
// topic of the subscription's period.
func SubscriptionEventKey(subscriptionID string, topic Topic, period int) string {
	return fmt.Sprintf(SubscriptionEventKeyFormat, subscriptionID, topic, strconv.Itoa(period))
}

// DeliveryConfirmation is a person's word that a failed or uncertain
// message reached its destination: checked with the destination, which
// has it (once).
type DeliveryConfirmation struct {
	MessageID int64
	// Note says how it was confirmed (whom at the destination, a ticket):
	// required. It becomes the note of the message's item.
	Note string
	// Actor is the calling token's name, never a request field;
	// ActorDetail is free text the person adds (their name).
	Actor       string
	ActorDetail string
}

// Validate checks the request-supplied fields.
func (c DeliveryConfirmation) Validate() error {
	var vs violations
	checkNote(&vs, c.Note, "say how the destination confirmed it has the message", c.ActorDetail)
	return vs.err()
}
