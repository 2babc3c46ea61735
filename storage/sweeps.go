package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.SweepWork = (*Store)(nil)

// sweepTable is the sweeper's queue (SweepQueue): one row per subscription, due when
// its access ends unless an event extends it first (applySubscription
// moves it).
//
// A sweep is never given up: ending an access that is over stays owed
// however long it fails. A sweep that used its attempts is put back by
// its queue (rearmAfter): pending, its attempts counted from 0 again, due
// after the backoff of its last attempt, or an hour later when its
// workers stopped during each attempt (so that a sweep that takes its
// process down does not do so at once again); and it opens a sweep_failing
// item about its subscription (sweepFailing). Once what failed it is
// fixed — most often a plan removed from the configuration while
// subscriptions on it are still live — it ends the access as any sweep
// does.
var sweepTable = newLeasedTable(leasedTable{table: "subscription_sweeps", noun: "sweep", failed: sweepFailing, rearmAfter: "1 hour"})

// sweepFailing opens the sweep_failing items of the sweeps of failed,
// which used their attempts and were put back, one per subscription and
// paid period: a sweep failing again for the same access end opens none.
func sweepFailing(ctx context.Context, tx pgx.Tx, failed []failedRow, maxAttempts int) error {
	var (
		s    fulfillment.ItemSubject
		id   int64
		next time.Time
	)
	return failRows(ctx, tx, `
		SELECT w.id, s.id::text, s.org_id, s.environment, s.provider, s.periods, w.next_attempt_at
		FROM subscription_sweeps w JOIN subscriptions s ON s.id = w.subscription_id
		WHERE w.id = ANY($1)`, failed,
		&id, []any{&id, &s.SubscriptionID, &s.OrgID, &s.Environment, &s.Provider, &s.Periods, &next}, func(r failedRow) item {
			detail := fmt.Sprintf("the sweep that ends this subscription's access failed %d times; last error: %s", maxAttempts, r.cause)
			if r.abandoned {
				detail = fmt.Sprintf("the sweep that ends this subscription's access did not complete in %d attempts (the worker stopped during each)", maxAttempts)
			}
			detail += fmt.Sprintf(". Its access has not ended. The sweeper tries again from %s on, until it succeeds: fix what fails it (a plan missing from the configuration: configure it again)",
				next.UTC().Format(time.RFC3339))
			return item{kind: fulfillment.ReconSweepFailing, subject: s, detail: detail}
		})
}

// SweepProcess implements fulfillment.SweepWork. The subscription is
// locked (waiting at most the work lock wait, defaultWorkLockWait) before
// its sweep is written, as every writer of both does, and decided on as
// it is now: a renewal committed meanwhile has moved the
// sweep, which this then leaves alone.
func (s *Store) SweepProcess(ctx context.Context, id int64, owner string, now time.Time) (bool, error) {
	var (
		ended bool
		q     queued
	)
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		// The lock wait is set with the read of the sweep, before the
		// subscription's lock (a sweep no longer held locks nothing).
		var subID uuid.UUID
		err := tx.QueryRow(ctx, `SELECT subscription_id, set_config('lock_timeout', $3, true) FROM subscription_sweeps WHERE `+
			leaseHeld("ARRAY[$1::bigint]", "$2"), id, owner, s.workLockWait).Scan(&subID, nil)
		if errors.Is(err, pgx.ErrNoRows) {
			return sweepTable.lost(id)
		}
		if err != nil {
			return fmt.Errorf("reading sweep: %w", interpret(err))
		}
		rec, err := lockSubscription(ctx, tx, `id = $1`, subID)
		if err != nil {
			return err
		}
		plan, err := s.plans.For(rec)
		if err != nil {
			return err
		}
		if now.IsZero() {
			// The database's clock decided the sweep was due: it decides
			// whether the access ended too.
			if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
				return fmt.Errorf("reading the time: %w", interpret(err))
			}
		}
		if ended, q, err = s.sweep(ctx, tx, rec, plan, now); err != nil {
			return err
		}
		// Done once access ended (or there is none to end); otherwise due
		// again when the access now ends. Either only while owner still
		// holds the sweep: an event that moved it meanwhile has the last
		// word.
		next := rec.AccessEnds(plan)
		if rec.AccessEnded || next.IsZero() {
			_, err = tx.Exec(ctx, `UPDATE subscription_sweeps SET state = 'done', processed_at = clock_timestamp(),
					lease_owner = NULL, lease_until = NULL, last_error = NULL
				WHERE `+leaseHeld("ARRAY[$1::bigint]", "$2"), id, owner)
		} else {
			_, err = tx.Exec(ctx, `UPDATE subscription_sweeps SET next_attempt_at = $3, attempts = 0,
					lease_owner = NULL, lease_until = NULL
				WHERE `+leaseHeld("ARRAY[$1::bigint]", "$2"), id, owner, next)
		}
		if err != nil {
			return fmt.Errorf("completing sweep: %w", interpret(err))
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	s.wake(q)
	return ended, nil
}
