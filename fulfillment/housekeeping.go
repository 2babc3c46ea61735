package fulfillment

import (
	"context"
	"fmt"
	"time"
)

// HousekeepingTask is one of the service's recurring chores, run about once
// per interval by one replica or another:
//   - TaskFulfillmentSLA opens a paid_not_fulfilled reconciliation item for
//     every order paid longer ago than the fulfillment SLA that is still
//     waiting for its fulfillment (AwaitingFulfillment) — one per order, ever;
//   - TaskRawBodyPurge drops the raw bodies of stored provider events older
//     than the retention that are no longer pending, keeping their
//     normalized fields and their decision.
type HousekeepingTask string

// Housekeeping tasks.
const (
	TaskFulfillmentSLA HousekeepingTask = "fulfillment_sla"
	TaskRawBodyPurge   HousekeepingTask = "raw_body_purge"
)

// Housekeeping defaults: the configuration and the housekeeper fill their
// zero values from these.
const (
	DefaultHousekeepingInterval = time.Minute
	DefaultFulfillmentSLA       = time.Hour
	DefaultRawBodyRetention     = 30 * 24 * time.Hour
	DefaultHousekeepingBatch    = 1000
)

// AwaitingFulfillment reports whether an order in state s was paid and has
// not been fulfilled yet: paid (its grants are being applied) or fulfilling
// (its external lines are being delivered). An order on hold already has
// an item of its own; fulfilled, refunded, cancelled and expired orders wait
// for nothing.
func (s State) AwaitingFulfillment() bool {
	return s == StatePaid || s == StateFulfilling
}

// PastFulfillmentSLA reports whether an order in state s, paid at paidAt
// (zero: never paid), has waited for its fulfillment longer than sla at now.
// storage.Store.OpenOverdueFulfillments applies the same rule in SQL.
func PastFulfillmentSLA(s State, paidAt, now time.Time, sla time.Duration) bool {
	return s.AwaitingFulfillment() && !paidAt.IsZero() && paidAt.Before(now.Add(-sla))
}

// OverdueDetail is the detail of the paid_not_fulfilled item of an order
// in state s, paid at paidAt, past the fulfillment SLA sla.
func OverdueDetail(s State, paidAt time.Time, sla time.Duration) string {
	return fmt.Sprintf("paid at %s and still %s past the fulfillment SLA of %s",
		paidAt.UTC().Format(time.RFC3339), s, sla)
}

// HousekeepingWork is the storage of the housekeeper: one leased queue item
// per task, due again an interval after each run, and the tasks' work in
// bounded batches — each batch a short transaction of its own, so that no
// run holds a long transaction. Every batch is idempotent: two replicas
// running the same task at once (one lost its liveness mid-run) do no harm.
type HousekeepingWork interface {
	// HousekeepingTask returns the task of claim id; a lease-lost error
	// (worker.ErrLeaseLost) when owner no longer holds it.
	HousekeepingTask(ctx context.Context, id int64, owner string) (HousekeepingTask, error)
	// HousekeepingDone records a run of claim id that did n things and
	// makes the task due again after interval (by the database's clock); a
	// lease-lost error when owner no longer holds it.
	HousekeepingDone(ctx context.Context, id int64, owner string, n int, interval time.Duration) error
	// OpenOverdueFulfillments opens a paid_not_fulfilled item for up to
	// limit orders past the SLA at now (the zero time: the database's
	// clock) that have none yet, and returns how many orders it looked at
	// (fewer than limit: no more are left) and how many items it opened.
	// However many run at once, an order gets one item: the item's key is
	// unique.
	OpenOverdueFulfillments(ctx context.Context, now time.Time, sla time.Duration, limit int) (seen, opened int, err error)
	// PurgeRawBodies drops the raw bodies of up to limit events received
	// longer than retention before now (the zero time: the database's
	// clock) that are no longer pending, and returns how many events it
	// went through (fewer than limit: no more are left for now) and how
	// many bodies it dropped. An event still pending keeps its body, and
	// loses it in a later batch once it has settled.
	PurgeRawBodies(ctx context.Context, now time.Time, retention time.Duration, limit int) (seen, purged int, err error)
}
