package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var (
	_ fulfillment.InboxStore = (*Store)(nil)
	_ fulfillment.InboxWork  = (*Store)(nil)
)

// inboxChannel is the LISTEN/NOTIFY channel an insert trigger signals.
const inboxChannel = "inbox_events"

// InboxClaim implements fulfillment.InboxWork. Claiming pushes
// next_attempt_at to the end of the lease, so leased events drop out of the
// claim scan until the lease expires; the partial index holds pending events
// only, so a claim never scans processed history. A due event that has used
// its attempts without completing — its worker died each time, which
// InboxRetry never saw — is failed here, with a failed_event item, instead
// of being leased again.
func (s *Store) InboxClaim(ctx context.Context, owner string, limit int, lease time.Duration, maxAttempts int) ([]fulfillment.InboxClaim, error) {
	rows, err := s.leasePool.Query(ctx, `
		WITH due AS (
			SELECT id, attempts FROM inbox_events
			WHERE state = 'pending' AND next_attempt_at <= clock_timestamp()
			ORDER BY next_attempt_at, id
			LIMIT $3
			FOR UPDATE SKIP LOCKED
		), exhausted AS (
			UPDATE inbox_events e SET
				state = 'failed', decision = 'failed', processed_at = clock_timestamp(),
				lease_owner = NULL, lease_until = NULL,
				last_error = coalesce(e.last_error || '; ', '') || 'abandoned: no attempt completed'
			FROM due WHERE e.id = due.id AND due.attempts >= $4
			RETURNING e.id, e.org_id, e.environment, e.provider, e.attempts
		), items AS (
			INSERT INTO reconciliation_items (kind, org_id, environment, inbox_event_id, provider, detail, dedupe_key)
			SELECT 'failed_event', org_id, environment, id, provider,
				'processing did not complete in ' || attempts || ' attempts (the worker stopped during each)',
				'inbox|' || id
			FROM exhausted
			ON CONFLICT ON CONSTRAINT reconciliation_items_dedupe_key DO NOTHING
		)
		UPDATE inbox_events e SET
			lease_owner = $1,
			lease_until = clock_timestamp() + $2::interval,
			next_attempt_at = clock_timestamp() + $2::interval,
			attempts = e.attempts + 1
		FROM due WHERE e.id = due.id AND due.attempts < $4
		RETURNING e.id, e.attempts`, owner, lease, limit, maxAttempts)
	if err != nil {
		return nil, fmt.Errorf("claiming inbox events: %w", interpret(err))
	}
	claims, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fulfillment.InboxClaim])
	if err != nil {
		return nil, fmt.Errorf("claiming inbox events: %w", interpret(err))
	}
	return claims, nil
}

// InboxRelease implements fulfillment.InboxWork.
func (s *Store) InboxRelease(ctx context.Context, owner string) (int, error) {
	tag, err := s.leasePool.Exec(ctx, `
		UPDATE inbox_events SET lease_owner = NULL, lease_until = NULL,
			next_attempt_at = clock_timestamp(), attempts = greatest(attempts - 1, 0)
		WHERE lease_owner = $1 AND state = 'pending'`, owner)
	if err != nil {
		return 0, fmt.Errorf("releasing inbox leases: %w", interpret(err))
	}
	return int(tag.RowsAffected()), nil
}

// InboxRetry implements fulfillment.InboxWork.
func (s *Store) InboxRetry(ctx context.Context, id int64, owner, cause string, next time.Time, maxAttempts int) (bool, error) {
	failed := false
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var (
			state         fulfillment.InboxState
			org, env, evt string
			provider      string
		)
		err := tx.QueryRow(ctx, `
			UPDATE inbox_events SET
				state = CASE WHEN attempts >= $4 THEN 'failed' ELSE 'pending' END,
				last_error = $3, next_attempt_at = $5, lease_owner = NULL, lease_until = NULL,
				processed_at = CASE WHEN attempts >= $4 THEN clock_timestamp() END,
				decision = CASE WHEN attempts >= $4 THEN 'failed' END
			WHERE id = $1 AND state = 'pending' AND lease_owner = $2
			RETURNING state, org_id, environment, event_id, provider`,
			id, owner, cause, maxAttempts, next).Scan(&state, &org, &env, &evt, &provider)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("event %d: %w", id, fulfillment.ErrLeaseLost)
		}
		if err != nil {
			return fmt.Errorf("recording failed attempt: %w", interpret(err))
		}
		if state != fulfillment.InboxFailed {
			return nil
		}
		failed = true
		_, err = tx.Exec(ctx, `
			INSERT INTO reconciliation_items (kind, org_id, environment, inbox_event_id, provider, detail, dedupe_key)
			VALUES ('failed_event', $1, $2, $3, $4, $5, $6)
			ON CONFLICT ON CONSTRAINT reconciliation_items_dedupe_key DO NOTHING`,
			org, env, id, provider,
			fmt.Sprintf("processing failed %d times; last error: %s", maxAttempts, cause),
			fmt.Sprintf("inbox|%d", id))
		if err != nil {
			return fmt.Errorf("opening failed_event item: %w", interpret(err))
		}
		return nil
	})
	return failed, err
}

// InboxListen implements fulfillment.InboxWork. Inserts committed by this
// store wake in-process listeners directly; inserts by other replicas
// arrive as a NOTIFY on a connection held outside the pool, re-established
// after errors.
func (s *Store) InboxListen(ctx context.Context, wake func()) error {
	s.wakeMu.Lock()
	s.wakers = append(s.wakers, wake)
	n := len(s.wakers) - 1
	s.wakeMu.Unlock()
	defer func() {
		s.wakeMu.Lock()
		s.wakers[n] = nil
		s.wakeMu.Unlock()
	}()
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			break
		}
		// Polling covers the gap; subscribe again shortly.
		if !errors.Is(err, context.Canceled) {
			s.log.Warn("inbox listener lost its connection; polling until it is back", "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

func (s *Store) listenOnce(ctx context.Context, wake func()) error {
	pooled, err := s.pool.Acquire(ctx)
	if err != nil {
		return interpret(err)
	}
	// A connection that has LISTENed is not returned to the pool.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+inboxChannel); err != nil {
		return interpret(err)
	}
	wake() // catch up with anything inserted before we listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return interpret(err)
		}
		wake()
	}
}

// wakeLocal calls the in-process listeners.
func (s *Store) wakeLocal() {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	for _, wake := range s.wakers {
		if wake != nil {
			wake()
		}
	}
}
