package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.PollWork = (*Store)(nil)

// pollQueue is the status poller's queue: one row per started payment. A
// poll that used its attempts fails without an item: a payer who never
// paid leaves a payment without an outcome, which is no anomaly.
var pollQueue = newLeasedTable(leasedTable{table: "payment_polls", noun: "poll"})

// queuePoll queues the first poll of a started payment, after.
func queuePoll(ctx context.Context, tx pgx.Tx, startID int64, after time.Duration) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO payment_polls (start_id, next_attempt_at) VALUES ($1, now() + $2::interval)
		ON CONFLICT (start_id) DO NOTHING`, startID, after)
	if err != nil {
		return fmt.Errorf("queueing status poll: %w", interpret(err))
	}
	return nil
}

// PollClaim implements fulfillment.PollWork.
func (s *Store) PollClaim(ctx context.Context, owner string, limit int, lease time.Duration, maxAttempts int, inFlight []int64) ([]fulfillment.Claim, error) {
	return s.claim(ctx, pollQueue, owner, limit, lease, maxAttempts, inFlight)
}

// PollRelease implements fulfillment.PollWork.
func (s *Store) PollRelease(ctx context.Context, owner string) (int, error) {
	return s.release(ctx, pollQueue, owner)
}

// PollReclaim implements fulfillment.PollWork.
func (s *Store) PollReclaim(ctx context.Context) (int, error) {
	return s.reclaim(ctx, pollQueue)
}

// PollRetry implements fulfillment.PollWork.
func (s *Store) PollRetry(ctx context.Context, id int64, owner, cause string, next time.Time, maxAttempts int) (bool, error) {
	return s.retry(ctx, pollQueue, id, owner, cause, next, maxAttempts)
}

// PollLoad implements fulfillment.PollWork. An outcome is known once the
// started payment's attempt is anything but created.
func (s *Store) PollLoad(ctx context.Context, id int64, owner string) (fulfillment.PaymentStart, bool, error) {
	var known bool
	start, err := scanStart(s.pool.QueryRow(ctx, `SELECT `+startColumns+` FROM payment_starts
		WHERE id = (SELECT start_id FROM payment_polls WHERE id = $1 AND state = 'pending' AND lease_owner = $2)`, id, owner))
	if errors.Is(err, pgx.ErrNoRows) {
		return start, false, fmt.Errorf("poll %d: %w", id, fulfillment.ErrLeaseLost)
	}
	if err != nil {
		return start, false, fmt.Errorf("reading status poll: %w", interpret(err))
	}
	err = s.pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM payment_attempts
			WHERE order_id = $1::uuid AND provider = $2 AND attempt_ref = $3 AND state <> 'created')`,
		start.OrderID, start.Provider, start.PaymentID).Scan(&known)
	if err != nil {
		return start, false, fmt.Errorf("reading payment attempt: %w", interpret(err))
	}
	return start, known, nil
}

// PollRecord implements fulfillment.PollWork.
func (s *Store) PollRecord(ctx context.Context, id int64, owner string, ev fulfillment.ProviderEvent, raw []byte, done bool) error {
	stored := false
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var held bool
		err := tx.QueryRow(ctx, `SELECT true FROM payment_polls WHERE id = $1 AND state = 'pending' AND lease_owner = $2 FOR UPDATE`,
			id, owner).Scan(&held)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("poll %d: %w", id, fulfillment.ErrLeaseLost)
		}
		if err != nil {
			return fmt.Errorf("locking status poll: %w", interpret(err))
		}
		if ev.EventID != "" {
			sql, args := InboxInsertStatement(ev, raw)
			tag, err := tx.Exec(ctx, sql, args...)
			if err != nil {
				return fmt.Errorf("storing polled event: %w", interpret(err))
			}
			stored = tag.RowsAffected() > 0
		}
		if done {
			if _, err := tx.Exec(ctx, `UPDATE payment_polls SET state = 'done', processed_at = now(),
				lease_owner = NULL, lease_until = NULL WHERE id = $1`, id); err != nil {
				return fmt.Errorf("completing status poll: %w", interpret(err))
			}
		}
		return nil
	})
	if err == nil && stored {
		s.inboxSignal.committed()
	}
	return err
}
