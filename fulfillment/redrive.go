package fulfillment

import (
	"context"
	"strconv"
	"time"
)

// Bulk re-drive: replaying stored events, or retrying outbox messages, by
// filter. A run records the items it will apply, each once (a primary
// key), and an org has at most one run at a time (a unique index).

// RedriveTarget is what a re-drive applies to.
type RedriveTarget string

// Re-drive targets.
const (
	// RedriveEvents replays stored provider events (as EventReplay does).
	RedriveEvents RedriveTarget = "events"
	// RedriveOutbox retries outbox messages (as DeliveryRetry does).
	RedriveOutbox RedriveTarget = "outbox"
)

// RedriveState is a run's state.
type RedriveState string

// Run states.
const (
	RedriveRunning   RedriveState = "running"
	RedriveDone      RedriveState = "done"
	RedriveCancelled RedriveState = "cancelled"
)

// Re-drive bounds.
const (
	// MaxRedriveItems is the most items one run applies.
	MaxRedriveItems = 10_000
	// RedriveSampleSize is the items a plan shows.
	RedriveSampleSize = 10
	// RedriveListSize is the runs a listing shows.
	RedriveListSize = 50
)

// RedriveFilter selects the items of a re-drive, in one org.
type RedriveFilter struct {
	Target      RedriveTarget `json:"target"`
	OrgID       string        `json:"org_id"`
	Environment Environment   `json:"environment,omitempty"`
	// State is the items' state: an event's (processed, ignored,
	// unmatched, failed) or a message's (failed, uncertain).
	State string `json:"state"`
	// Events only.
	Type       string   `json:"type,omitempty"`
	Decision   string   `json:"decision,omitempty"`
	EndpointID string   `json:"endpoint_id,omitempty"`
	Provider   Provider `json:"provider,omitempty"`
	// ReceivedAfter and ReceivedBefore bound when the events were received
	// (at or after, before); zero is unbounded.
	ReceivedAfter  time.Time `json:"received_after,omitzero"`
	ReceivedBefore time.Time `json:"received_before,omitzero"`
	// Outbox only.
	DestinationID string `json:"destination_id,omitempty"`
}

// Validate checks the filter names one org and a state the action applies
// to.
func (f RedriveFilter) Validate() error {
	var vs violations
	checkOrgID(&vs, "filter.org_id", f.OrgID)
	switch f.Environment {
	case "", EnvLive, EnvTest:
	default:
		vs.add("filter.environment", "must be live or test when set")
	}
	switch f.Target {
	case RedriveEvents:
		switch f.State {
		case "processed", "ignored", "unmatched", "failed":
		default:
			vs.add("filter.state", "for events: one of processed, ignored, unmatched, failed (pending events are processed already)")
		}
		if f.DestinationID != "" {
			vs.add("filter.destination_id", "applies to the outbox only")
		}
		checkEventFields(&vs, "filter.", eventFields{Type: f.Type, Decision: f.Decision, EndpointID: f.EndpointID,
			Provider: f.Provider, ReceivedAfter: f.ReceivedAfter, ReceivedBefore: f.ReceivedBefore})
	case RedriveOutbox:
		switch f.State {
		case "failed", "uncertain":
		default:
			vs.add("filter.state", "for outbox messages: failed or uncertain (the states a retry applies to)")
		}
		if f.Type != "" || f.Decision != "" || f.EndpointID != "" || f.Provider != "" || !f.ReceivedAfter.IsZero() || !f.ReceivedBefore.IsZero() {
			vs.add("filter", "type, decision, endpoint_id, provider and the received times apply to events only")
		}
		if f.DestinationID != "" {
			checkDestination(&vs, "filter.destination_id", f.DestinationID)
		}
	default:
		vs.add("filter.target", "must be events or outbox")
	}
	return vs.err()
}

// Effect says in words what applying a re-drive does.
func (f RedriveFilter) Effect() string {
	if f.Target == RedriveEvents {
		return "Each event is put back in the inbox and decided again against the order's current state; " +
			"effects already applied (grants, ledger movements, deliveries) are never applied twice."
	}
	return "Each message is queued for delivery again now, under its own idempotency key (attempts from 0); " +
		"a receiver honouring the key applies it at most once. Items of a disabled destination wait for it."
}

// RedriveSample is one item a filter matches.
type RedriveSample struct {
	ID      int64
	Summary string
	OrderID string
}

// RedrivePlan is what a re-drive would do.
type RedrivePlan struct {
	Matched int64
	Sample  []RedriveSample
}

// Redrive is one run.
type Redrive struct {
	ID                      int64
	Filter                  RedriveFilter
	State                   RedriveState
	Total, Applied, Skipped int64
	CreatedBy               string
	CreatedByDetail         string
	CreatedAt               time.Time
	FinishedAt              time.Time // zero while running
	CancelledBy             string
}

// RedriveStore keeps re-drive runs and applies them.
type RedriveStore interface {
	// RedrivePlan counts (up to MaxRedriveItems+1) and samples the items f
	// matches.
	RedrivePlan(ctx context.Context, f RedriveFilter) (RedrivePlan, error)
	// RedriveStart records a run of the items f matches (at most
	// MaxRedriveItems, oldest first). ErrFailedPrecondition: the org has a
	// run going, or nothing matches.
	RedriveStart(ctx context.Context, f RedriveFilter, by, detail string) (Redrive, error)
	// RedriveGet returns a run, or ErrNotFound.
	RedriveGet(ctx context.Context, id int64) (Redrive, error)
	// RedriveList returns the newest runs of orgs (nil: every org; org,
	// when set, only that one).
	RedriveList(ctx context.Context, orgs []string, org string) ([]Redrive, error)
	// RedriveCancel cancels a running run. ErrFailedPrecondition: it has
	// ended; ErrNotFound.
	RedriveCancel(ctx context.Context, id int64, by string) (Redrive, error)
	// RedriveStep applies the next batch of one running run not being
	// applied elsewhere; it reports whether it found one.
	RedriveStep(ctx context.Context, batch int) (bool, error)
}

// ParseRedriveID reads a run id.
func ParseRedriveID(field, id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		var vs violations
		vs.add(field, "must be a re-drive id: a positive decimal number such as \"7\"")
		return 0, vs.err()
	}
	return n, nil
}

// ValidateActorDetail checks the free text a person adds to an action.
func ValidateActorDetail(field, v string) error {
	var vs violations
	checkText(&vs, field, v, false)
	return vs.err()
}
