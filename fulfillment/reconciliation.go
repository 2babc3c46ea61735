package fulfillment

import (
	"context"
	"time"

	"github.com/shopspring/decimal"
)

// ReconState is where a reconciliation item is.
type ReconState string

// Reconciliation item states.
const (
	ReconOpen     ReconState = "open"
	ReconResolved ReconState = "resolved"
)

// ReconItem is a situation a person must look at. Resolving it records
// who and why; nothing is ever deleted.
type ReconItem struct {
	ID             int64
	Kind           ReconKind
	State          ReconState
	OrgID          string
	Environment    Environment
	OrderID        string
	EventID        string
	Provider       Provider
	AttemptRef     string
	PaymentID      string
	Amount         *decimal.Decimal
	ExpectedAmount *decimal.Decimal
	Token          string
	Network        string
	Detail         string
	CreatedAt      time.Time
	ResolvedAt     *time.Time
	ResolvedBy     string
	ResolutionNote string
}

// ReconFilter selects reconciliation items. Empty fields match everything.
type ReconFilter struct {
	// VisibleOrgs restricts the result to these orgs; nil means every org.
	VisibleOrgs []string
	OrgID       string
	Kind        ReconKind
	State       ReconState
	OrderID     string
}

// Validate checks the request-supplied filter values.
func (f ReconFilter) Validate() error {
	var vs violations
	if f.OrgID != "" {
		checkOrgID(&vs, "org_id", f.OrgID)
	}
	if f.Kind != "" && !f.Kind.Valid() {
		vs.add("kind", "must be a reconciliation kind such as %q or %q", ReconExtraPayment, ReconAmountMismatch)
	}
	if f.State != "" && f.State != ReconOpen && f.State != ReconResolved {
		vs.add("state", "must be %q or %q", ReconOpen, ReconResolved)
	}
	if f.OrderID != "" {
		if err := ValidateOrderID("order_id", f.OrderID); err != nil {
			return err
		}
	}
	return vs.err()
}

// ReconListParams selects one page of items.
type ReconListParams struct {
	Filter ReconFilter
	// BeforeID continues a listing after the item with this id.
	BeforeID int64
	Limit    int
}

// ReconStore keeps reconciliation items.
type ReconStore interface {
	// ReconList returns up to p.Limit items matching p.Filter, newest first.
	ReconList(ctx context.Context, p ReconListParams) ([]ReconItem, error)
}
