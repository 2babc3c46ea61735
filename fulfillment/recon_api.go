package fulfillment

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ReconResolution says how a person resolved a reconciliation item.
type ReconResolution string

// Resolutions.
const (
	// ResolutionRefunded: the money was returned to the payer.
	ResolutionRefunded ReconResolution = "refunded"
	// ResolutionFulfilledManually: the customer got what was paid for by
	// other means (a key sent by hand, a delivery done in the other system).
	ResolutionFulfilledManually ReconResolution = "fulfilled_manually"
	// ResolutionConfirmedDuplicateDelivery: checked at the provider or the
	// destination: it was the same payment (or message) twice, nothing
	// more is owed.
	ResolutionConfirmedDuplicateDelivery ReconResolution = "confirmed_duplicate_delivery"
	// ResolutionRevoked: what a refund took back was revoked (licenses
	// disabled, access ended).
	ResolutionRevoked ReconResolution = "revoked"
	// ResolutionRetried: the failed step was run again and succeeded (an
	// outbox message retried, an event replayed).
	ResolutionRetried ReconResolution = "retried"
	// ResolutionNoAction: looked at; nothing needs doing.
	ResolutionNoAction ReconResolution = "no_action"
	// ResolutionMatchedLater is the service's own: the order or
	// subscription an unmatched payment named was created after it, and the
	// payment was processed again against it. A person cannot choose it.
	ResolutionMatchedLater ReconResolution = "matched_later"
	// ResolutionConfirmedDelivered is set with a person's confirmation
	// that a failed or uncertain message reached its destination
	// (OutboxStore.DeliveryConfirm), which marks the message delivered.
	// Resolving an item by hand cannot choose it: the message would stay
	// undelivered.
	ResolutionConfirmedDelivered ReconResolution = "confirmed_delivered"
)

// Resolutions lists every resolution a person may choose, in the order
// documentation shows them.
var Resolutions = []ReconResolution{
	ResolutionRefunded, ResolutionFulfilledManually, ResolutionConfirmedDuplicateDelivery,
	ResolutionRevoked, ResolutionRetried, ResolutionNoAction,
}

// Valid reports whether r is a known resolution.
func (r ReconResolution) Valid() bool {
	for _, k := range Resolutions {
		if r == k {
			return true
		}
	}
	return false
}

// ParseReconItemID reads a reconciliation item id.
func ParseReconItemID(field, id string) (int64, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		var vs violations
		vs.add(field, "must be a reconciliation item id: a positive decimal number such as \"42\"")
		return 0, vs.err()
	}
	return n, nil
}

// ReconResolve is a person's resolution of an item.
type ReconResolve struct {
	ID         int64
	Resolution ReconResolution
	// Note says what was done and why: required.
	Note string
	// Actor is the calling token's name, never a request field.
	Actor string
	// ActorDetail is free text the person adds (their name, a ticket).
	ActorDetail string
}

// Validate checks the request-supplied fields.
func (r ReconResolve) Validate() error {
	var vs violations
	switch {
	case r.Resolution == "":
		vs.add("resolution", "is required: one of %s", resolutionList())
	case !r.Resolution.Valid():
		vs.add("resolution", "must be one of %s", resolutionList())
	}
	checkNote(&vs, r.Note, "say what was done and why", r.ActorDetail)
	return vs.err()
}

// checkNote checks what a person writes with an action: the note, required
// (missing says what it should say; spaces alone say nothing), and the
// optional actor detail.
func checkNote(vs *violations, note, missing, actorDetail string) {
	if strings.TrimSpace(note) == "" {
		vs.add("note", "is required: %s, for whoever looks next", missing)
	} else if err := RuleNote.Check(note); err != nil {
		vs.add("note", "%v", err)
	}
	if actorDetail != "" {
		checkText(vs, "actor_detail", actorDetail, false)
	}
}

func resolutionList() string {
	s := ""
	for i, r := range Resolutions {
		if i > 0 {
			s += ", "
		}
		s += strconv.Quote(string(r))
	}
	return s
}

// AlreadyResolved is the error of resolving an item twice.
func AlreadyResolved(it ReconItem) error {
	when := "at an unknown time"
	if it.ResolvedAt != nil {
		when = "at " + it.ResolvedAt.UTC().Format(time.RFC3339)
	}
	by := it.ResolvedBy
	if by == "" {
		by = "an unknown resolver"
	}
	how := ""
	if it.Resolution != "" {
		how = " as " + string(it.Resolution)
	}
	return fmt.Errorf("%w: reconciliation item %d was resolved%s %s by %s; its resolution is kept",
		ErrFailedPrecondition, it.ID, how, when, by)
}

// ReconSummaryRow is what needs a person in one org and environment.
type ReconSummaryRow struct {
	OrgID       string
	Environment Environment
	// OpenByKind counts open items by kind (kinds without one are absent).
	OpenByKind map[ReconKind]int64
	// OldestOpen is when the oldest open item was opened; nil without one.
	OldestOpen *time.Time
	// EventsPending are stored events still to be decided; EventsFailed
	// used their attempts without being decided.
	EventsPending, EventsFailed int64
	// PaidNotFulfilled counts orders with a confirmed payment that are not
	// fulfilled (paid, fulfilling or on hold).
	PaidNotFulfilled int64
	// OutboxFailed and OutboxUncertain count messages in those states.
	OutboxFailed, OutboxUncertain int64
}

// OpenItems is the number of open items of the row.
func (r ReconSummaryRow) OpenItems() int64 {
	var n int64
	for _, c := range r.OpenByKind {
		n += c
	}
	return n
}
