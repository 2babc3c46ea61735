package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

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

// queueOrderEffects queues the attempt, the order's move and its grants.
func queueOrderEffects(b *pgx.Batch, m matchedOrder, ev fulfillment.ProviderEvent, out fulfillment.Outcome) {
	p := ev.Payment
	if out.Attempt != "" && p.AttemptRef != "" {
		var amount *string
		if p.HasAmount {
			a := p.Amount.String()
			amount = &a
		}
		// The stored state was read under the order row lock, which every
		// event of the order takes; the unique key still guarantees one row
		// per attempt.
		b.Queue(`
			INSERT INTO payment_attempts (order_id, provider, attempt_ref, state, amount, token, network)
			VALUES ($1, $2, $3, $4, $5::numeric, nullif($6, ''), nullif($7, ''))
			ON CONFLICT ON CONSTRAINT payment_attempts_ref_key DO UPDATE SET
				state = EXCLUDED.state,
				amount = coalesce(EXCLUDED.amount, payment_attempts.amount),
				token = coalesce(EXCLUDED.token, payment_attempts.token),
				network = coalesce(EXCLUDED.network, payment_attempts.network),
				updated_at = now()`,
			m.id, ev.Provider, p.AttemptRef, fulfillment.NextAttemptState(m.attempt(ev), out.Attempt),
			amount, p.Token, p.Network)
	}
	if out.NewState != "" || out.MarkPaid {
		// An absent ref is NULL, never '': a payment that does not identify
		// itself records none.
		paid := p.PaidRefs()
		b.Queue(`
			UPDATE orders SET
				state = coalesce(nullif($2, ''), state),
				paid_attempt_ref = CASE WHEN $3 THEN nullif($4, '') ELSE paid_attempt_ref END,
				paid_invoice_id  = CASE WHEN $3 THEN nullif($5, '') ELSE paid_invoice_id END,
				paid_payment_id  = CASE WHEN $3 THEN nullif($6, '') ELSE paid_payment_id END,
				paid_at          = CASE WHEN $3 THEN now() ELSE paid_at END,
				updated_at = now()
			WHERE id = $1`, m.id, out.NewState, out.MarkPaid, paid.AttemptRef, paid.InvoiceID, paid.PaymentID)
	}
	if !out.Grant {
		return
	}
	// One license per unit and one credit per balance line; the unique keys
	// make a repeated grant insert nothing.
	b.Queue(`
		INSERT INTO entitlements (order_id, line_no, unit, kind, value)
		SELECT l.order_id, l.line_no, u, 'license',
			'LIC-' || upper(replace(gen_random_uuid()::text, '-', ''))
		FROM order_lines l, generate_series(1, l.quantity) AS u
		WHERE l.order_id = $1 AND l.kind = 'license'
		ON CONFLICT ON CONSTRAINT entitlements_unit_key DO NOTHING`, m.id)
	b.Queue(`
		INSERT INTO ledger_entries (order_id, line_no, account_ref, movement, currency, minor_units)
		SELECT l.order_id, l.line_no, l.account_ref, 'credit', l.currency, l.unit_minor_units * l.quantity
		FROM order_lines l
		WHERE l.order_id = $1 AND l.kind = 'balance_credit'
		ON CONFLICT ON CONSTRAINT ledger_entries_movement_key DO NOTHING`, m.id)
}

// queueItem opens a reconciliation item unless the same situation already
// has one (the dedupe key names it).
func queueItem(b *pgx.Batch, kind fulfillment.ReconKind, inboxID int64, m matchedOrder,
	ev fulfillment.ProviderEvent, detail string) {
	p := ev.Payment
	dedupe := fmt.Sprintf("%s|%s|%s|%s|%s|%s", ev.Provider, ev.OrgID, ev.Environment, m.id, p.AttemptRef, p.PaymentID)
	switch {
	case kind == fulfillment.ReconUnidentifiedPayment:
		// Such payments cannot be told apart from one another: one item
		// per order, however many announcements.
		dedupe = "order|" + m.id
	case p.AttemptRef == "" && p.PaymentID == "":
		dedupe += "|" + ev.EventID
	}
	var amount, expected, linked *string
	if p.HasAmount {
		a := p.Amount.String()
		amount = &a
	}
	if m.order != nil {
		linked = &m.id
		if st := m.order.Settlement; st != nil {
			e := st.Amount.String()
			expected = &e
		}
	}
	b.Queue(`
		INSERT INTO reconciliation_items (kind, org_id, environment, order_id, inbox_event_id, provider,
			attempt_ref, payment_id, amount, expected_amount, token, network, detail, dedupe_key)
		VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''), nullif($8, ''), $9::numeric, $10::numeric,
			nullif($11, ''), nullif($12, ''), $13, $14)
		ON CONFLICT ON CONSTRAINT reconciliation_items_dedupe_key DO NOTHING`,
		kind, ev.OrgID, ev.Environment, linked, inboxID, ev.Provider, p.AttemptRef, p.PaymentID,
		amount, expected, p.Token, p.Network, detail, dedupe)
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

// settlementFrom reads the nullable settlement columns.
func settlementFrom(token, network, amount, tolerance *string) (*fulfillment.Settlement, error) {
	if token == nil {
		return nil, nil
	}
	st := &fulfillment.Settlement{Token: *token, Network: *network}
	var err error
	if st.Amount, err = decimal.NewFromString(*amount); err != nil {
		return nil, fmt.Errorf("parsing settlement amount: %w", err)
	}
	if st.Tolerance, err = decimal.NewFromString(*tolerance); err != nil {
		return nil, fmt.Errorf("parsing settlement tolerance: %w", err)
	}
	return st, nil
}
