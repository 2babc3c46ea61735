package fulfillment

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// MaxReplaysShown bounds the replays an event's view lists (the newest).
const MaxReplaysShown = 20

// StoredEvent is an inbox event as stored: its normalized fields, how it
// was decided, its processing, and its replays.
type StoredEvent struct {
	ID    int64
	Event ProviderEvent
	// ReceivedAt is when it was first stored.
	ReceivedAt time.Time
	State      InboxState
	Decision   Decision
	Reason     string
	// OrderID and SubscriptionID are the order and the subscription it was
	// applied to, if any.
	OrderID        string
	SubscriptionID string
	Attempts       int
	NextAttemptAt  *time.Time // pending only
	LastError      string
	ProcessedAt    *time.Time
	// RawBody is the verified body, when read and still stored
	// (RawBodyPurged: it was removed after the retention period).
	RawBody       []byte
	RawBodyPurged bool
	// Replays are its replays, newest first: at most MaxReplaysShown
	// (ReplayCount counts them all).
	Replays     []EventReplay
	ReplayCount int
}

// EventReplay is one replay of a stored event.
type EventReplay struct {
	By, ByDetail string
	At           time.Time
	// What the event's processing said before the replay.
	PreviousState     InboxState
	PreviousDecision  Decision
	PreviousReason    string
	PreviousAttempts  int
	PreviousLastError string
}

// EventFilter selects stored events. Empty fields match everything.
type EventFilter struct {
	// VisibleOrgs restricts the result to these orgs; nil means every org.
	VisibleOrgs []string
	OrgID       string
	Environment Environment
	State       InboxState
	Decision    Decision
	Type        string
	EndpointID  string
	OrderID     string
	Provider    Provider
	// ReceivedAfter and ReceivedBefore bound when the events were received
	// (at or after, before); zero is unbounded.
	ReceivedAfter, ReceivedBefore time.Time
}

// Valid reports whether s is a known inbox state.
func (s InboxState) Valid() bool {
	switch s {
	case InboxPending, InboxProcessed, InboxIgnored, InboxUnmatched, InboxFailed:
		return true
	}
	return false
}

// eventFields are what a list of stored events and a re-drive of them
// both filter on.
type eventFields struct {
	Type, Decision, EndpointID    string
	Provider                      Provider
	ReceivedAfter, ReceivedBefore time.Time
}

// checkEventFields checks f as the events' list does, each field named
// with prefix: a filter no event can match is a mistake to say, not
// "nothing matches".
func checkEventFields(vs *violations, prefix string, f eventFields) {
	if f.Decision != "" {
		if err := RuleEventType.Check(f.Decision); err != nil {
			vs.add(prefix+"decision", "%v", err)
		}
	}
	if f.Type != "" {
		if err := RuleEventType.Check(f.Type); err != nil {
			vs.add(prefix+"type", "%v", err)
		}
	}
	if f.EndpointID != "" && !ConfigIDPattern.MatchString(f.EndpointID) {
		vs.add(prefix+"endpoint_id", "must be an endpoint id: lowercase letters, digits, _ and -, at most 64 characters")
	}
	if f.Provider != "" && !ConfigIDPattern.MatchString(string(f.Provider)) {
		vs.add(prefix+"provider", "must be a provider name such as %q or %q", ProviderYolfi, ProviderTBank)
	}
	if !f.ReceivedAfter.IsZero() && !f.ReceivedBefore.IsZero() && !f.ReceivedAfter.Before(f.ReceivedBefore) {
		vs.add(prefix+"received_before", "must be later than %sreceived_after", prefix)
	}
}

// Validate checks the request-supplied filter values.
func (f EventFilter) Validate() error {
	var vs violations
	if f.OrgID != "" {
		checkOrgID(&vs, "org_id", f.OrgID)
	}
	filterEnvironment(&vs, f.Environment)
	if f.State != "" && !f.State.Valid() {
		vs.add("state", "must be %q, %q, %q, %q or %q", InboxPending, InboxProcessed, InboxIgnored, InboxUnmatched, InboxFailed)
	}
	checkEventFields(&vs, "", eventFields{Type: f.Type, Decision: string(f.Decision), EndpointID: f.EndpointID,
		Provider: f.Provider, ReceivedAfter: f.ReceivedAfter, ReceivedBefore: f.ReceivedBefore})
	if f.OrderID != "" {
		if err := ValidateOrderID("order_id", f.OrderID); err != nil {
			return err
		}
	}
	return vs.err()
}

// EventListParams selects one page of events.
type EventListParams struct {
	Filter EventFilter
	// BeforeID continues a listing after the event with this id.
	BeforeID int64
	Limit    int
}

// ParseInboxEventID reads a stored event's id (the inbox row's, not the
// provider's event id).
func ParseInboxEventID(field, id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		var vs violations
		vs.add(field, "must be a stored event id: a positive decimal number such as \"42\" (the id events list shows, not the provider's event id)")
		return 0, vs.err()
	}
	return n, nil
}

// EventReplayRequest asks to decide a stored event again.
type EventReplayRequest struct {
	ID int64
	// Actor is the calling token's name; ActorDetail what the person adds.
	Actor, ActorDetail string
}

// Validate checks the request-supplied fields.
func (r EventReplayRequest) Validate() error {
	var vs violations
	checkText(&vs, "actor_detail", r.ActorDetail, false)
	return vs.err()
}

// ReplayPending is the error of replaying an event still waiting in the
// queue: it will be decided anyway.
func ReplayPending(id int64) error {
	return fmt.Errorf("%w: event %d is pending already: the processor decides it when due; nothing was changed",
		ErrFailedPrecondition, id)
}

// EventStore reads and replays stored events.
type EventStore interface {
	// EventList returns up to p.Limit events matching p.Filter, newest
	// first, without raw bodies and replays.
	EventList(ctx context.Context, p EventListParams) ([]StoredEvent, error)
	// EventGet returns one event with its newest replays, and its raw body
	// when withBody; an unknown id is ErrNotFound.
	EventGet(ctx context.Context, id int64, withBody bool) (StoredEvent, error)
	// EventReplay puts a decided event back in the inbox queue (pending,
	// due now, attempts from 0, lease cleared) and records the replay, in
	// one transaction; the processor decides it again against the current
	// state. An event pending already is ReplayPending's error. It
	// returns the event as it is now.
	EventReplay(ctx context.Context, r EventReplayRequest) (StoredEvent, error)
}
