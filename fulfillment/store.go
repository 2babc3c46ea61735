package fulfillment

import (
	"context"

	"github.com/google/uuid"
)

// OrderStore keeps orders. Implementations enforce uniqueness with database
// constraints, never with a preceding read.
type OrderStore interface {
	// OrderCreate stores a new order awaiting payment and reports created =
	// true. When an order with the same (org, environment, merchant order id)
	// exists with the same content it returns that order and created = false;
	// with different content, or when the checkout session already pays
	// another order, it returns an error wrapping ErrConflict and changes
	// nothing.
	OrderCreate(ctx context.Context, spec OrderSpec) (order Order, created bool, err error)
	// OrderGet returns one order, or an error wrapping ErrNotFound.
	OrderGet(ctx context.Context, id string) (Order, error)
	// OrderDetail returns one order with its payment attempts,
	// entitlements, ledger entries and event timeline, or an error wrapping
	// ErrNotFound.
	OrderDetail(ctx context.Context, id string) (OrderDetail, error)
	// OrderList returns up to p.Limit orders matching p.Filter with ids below
	// p.BeforeID (when set), newest first.
	OrderList(ctx context.Context, p OrderListParams) ([]Order, error)
}

// OrderListParams selects one page of orders.
type OrderListParams struct {
	Filter OrderFilter
	// BeforeID continues a listing after the order with this id.
	BeforeID string
	Limit    int
}

// ValidateOrderID checks that id has the form of an order id.
func ValidateOrderID(field, id string) error {
	var vs violations
	if id == "" {
		vs.add(field, "is required")
	} else if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		vs.add(field, "must be an order id such as 019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b")
	}
	return vs.err()
}

// ValidateOrgID checks that id has the form of an org id.
func ValidateOrgID(field, id string) error {
	var vs violations
	checkOrgID(&vs, field, id)
	return vs.err()
}
