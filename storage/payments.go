package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
)

var _ fulfillment.PaymentStore = (*Store)(nil)

const startColumns = `id, order_id, org_id, environment, endpoint_id, provider, attempt, provider_order_id, state,
	currency, minor_units, description, coalesce(payment_id, ''), coalesce(payment_url, ''), detail,
	busy_until, asks, created_at, updated_at`

// startPaymentState is, after startColumns, the state of the start's
// payment as the order's payment attempt records it (empty for none): the
// attempt StartFinish records under the payment id, which notifications and
// polls move on (fulfillment.PaymentStart.PaymentState). Read by the
// attempts' unique key.
const startPaymentState = `coalesce((SELECT a.state FROM payment_attempts a
	WHERE a.order_id = payment_starts.order_id AND a.provider = payment_starts.provider
		AND a.attempt_ref = payment_starts.payment_id), '')`

func scanStart(r pgx.Row) (fulfillment.PaymentStart, error) { return scanStartWith(r) }

// scanStartWith scans startColumns, then more.
func scanStartWith(r pgx.Row, more ...any) (fulfillment.PaymentStart, error) {
	var (
		s         fulfillment.PaymentStart
		orderID   uuid.UUID
		busyUntil *time.Time
	)
	err := r.Scan(append([]any{&s.ID, &orderID, &s.OrgID, &s.Environment, &s.EndpointID, &s.Provider, &s.Attempt,
		&s.ProviderOrderID, &s.State, &s.Amount.Currency, &s.Amount.MinorUnits, &s.Description, &s.PaymentID,
		&s.PaymentURL, &s.Detail, &busyUntil, &s.Asks, &s.CreatedAt, &s.UpdatedAt}, more...)...)
	s.OrderID = orderID.String()
	if busyUntil != nil {
		s.BusyUntil = *busyUntil
	}
	return s, err
}

// StartBegin implements fulfillment.PaymentStore.
func (s *Store) StartBegin(ctx context.Context, r fulfillment.StartRequest) (fulfillment.PaymentStart, bool, error) {
	var (
		start fulfillment.PaymentStart
		ask   bool
		late  int // events that named the attempt before it was registered, queued again
	)
	// Run again after a deadlock, as OrderCreate.
	err := s.withRetriedTx(ctx, func(tx pgx.Tx) error {
		ask, late = false, 0
		var (
			org, env, state string
			total           fulfillment.Money
			now             time.Time
		)
		err := tx.QueryRow(ctx, `
			SELECT org_id, environment, state, total_currency, total_minor_units, clock_timestamp()
			FROM orders WHERE id = $1::uuid FOR UPDATE`, r.OrderID).
			Scan(&org, &env, &state, &total.Currency, &total.MinorUnits, &now)
		switch {
		case errors.Is(err, pgx.ErrNoRows) || (err == nil && r.VisibleOrgs != nil && !slices.Contains(r.VisibleOrgs, org)):
			return fulfillment.ErrOrderNotFound
		case err != nil:
			return fmt.Errorf("locking order: %w", interpret(err))
		}
		var latest *fulfillment.PaymentStart
		l, err := scanStart(tx.QueryRow(ctx, `SELECT `+startColumns+` FROM payment_starts
			WHERE order_id = $1::uuid ORDER BY attempt DESC LIMIT 1`, r.OrderID))
		switch {
		case err == nil:
			latest = &l
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("reading payment starts: %w", interpret(err))
		}
		if state != string(fulfillment.StatePendingPayment) {
			if latest != nil && !r.NewAttempt {
				start = *latest // repeated call after the payment: what it started
				return nil
			}
			return fmt.Errorf("%w: order is %s: only an order awaiting payment can be paid", fulfillment.ErrFailedPrecondition, state)
		}
		step, err := fulfillment.NextStart(latest, r.NewAttempt, r.ReplaceAttempt, now)
		if err != nil {
			return err
		}
		busy := now.Add(r.Busy)
		switch step {
		case fulfillment.StepReturn:
			start = *latest
			return nil
		case fulfillment.StepAsk:
			if latest.EndpointID != r.EndpointID {
				// Another provider would not know the id: the same attempt
				// could be paid twice.
				return fmt.Errorf("%w: attempt %d of this order was asked of endpoint %q and its answer was lost: call again with that endpoint",
					fulfillment.ErrFailedPrecondition, latest.Attempt, latest.EndpointID)
			}
			start, err = scanStart(tx.QueryRow(ctx, `UPDATE payment_starts SET busy_until = $2, asks = asks + 1, updated_at = now()
				WHERE id = $1 RETURNING `+startColumns, latest.ID, busy))
		case fulfillment.StepNew:
			n := 1
			if latest != nil {
				n = latest.Attempt + 1
			}
			start, err = scanStart(tx.QueryRow(ctx, `
				INSERT INTO payment_starts (order_id, org_id, environment, endpoint_id, provider, attempt,
					provider_order_id, state, currency, minor_units, description, busy_until)
				VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, 'starting', $8, $9, $10, $11)
				RETURNING `+startColumns,
				r.OrderID, org, env, r.EndpointID, r.Provider, n, fulfillment.ProviderOrderID(r.OrderID, n),
				total.Currency, total.MinorUnits, r.Description, busy))
		}
		if err != nil {
			return fmt.Errorf("recording payment start: %w", interpret(err))
		}
		ask = true
		if step == fulfillment.StepNew {
			// An event naming the attempt's provider order id, decided
			// before the attempt was registered, is processed again now.
			orderID, err := uuid.Parse(start.OrderID)
			if err != nil {
				return fmt.Errorf("payment start of order %q: %w", start.OrderID, err)
			}
			late, err = s.requeueLateEvents(ctx, tx, lateStartSQL, orderID, org, fulfillment.Environment(env), "", start.ProviderOrderID)
			return err
		}
		return nil
	})
	if err == nil {
		if late > 0 {
			// Committed with the attempt's registration: a crash from here
			// on leaves the events queued, for any replica to process.
			failpoint.Inject("start-after-create")
		}
		s.wakeLate(late)
	}
	return start, ask, err
}

// StartFinish implements fulfillment.PaymentStore.
func (s *Store) StartFinish(ctx context.Context, id int64, o fulfillment.StartOutcome) (fulfillment.PaymentStart, error) {
	var start fulfillment.PaymentStart
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		// The order's row lock first, as StartBegin takes it: the attempt
		// recorded below is written under it, as every decision about the
		// order writes its attempts, so a decision never meets an attempt
		// inserted after it read the order's.
		if _, err := tx.Exec(ctx, `
			SELECT 1 FROM orders WHERE id = (SELECT order_id FROM payment_starts WHERE id = $1) FOR UPDATE`, id); err != nil {
			return fmt.Errorf("locking the order of payment start %d: %w", id, interpret(err))
		}
		var err error
		start, err = scanStart(tx.QueryRow(ctx, `
			UPDATE payment_starts SET state = $2, payment_id = coalesce($3, payment_id),
				payment_url = coalesce($4, payment_url), detail = $5, busy_until = NULL, updated_at = now()
			WHERE id = $1 AND state = 'starting'
			RETURNING `+startColumns, id, o.State, opt(o.PaymentID), opt(o.PaymentURL), o.Detail))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: payment start %d was finished by another call", fulfillment.ErrStartBusy, id)
		}
		if err != nil {
			return fmt.Errorf("recording payment start: %w", interpret(err))
		}
		if start.PaymentID != "" {
			// The provider's payment is an attempt of the order; a
			// notification processed first recorded it already, further on.
			if _, err := tx.Exec(ctx, `
				INSERT INTO payment_attempts (order_id, provider, attempt_ref, state, amount, currency)
				VALUES ($1::uuid, $2, $3, 'created', $4, $5)
				ON CONFLICT ON CONSTRAINT payment_attempts_ref_key DO NOTHING`,
				start.OrderID, start.Provider, start.PaymentID, start.Amount.MinorUnits, start.Amount.Currency); err != nil {
				return fmt.Errorf("recording payment attempt: %w", interpret(err))
			}
		}
		if start.State == fulfillment.StartStarted && s.pollAfter > 0 {
			if err := queuePoll(ctx, tx, start.ID, s.pollAfter); err != nil {
				return err
			}
		}
		if start.State == fulfillment.StartReview {
			b := &pgx.Batch{}
			queueItem(b, item{kind: fulfillment.ReconDuplicateOrderID, detail: start.Detail,
				amount: fulfillment.MinorAmount(start.Amount.MinorUnits, start.Amount.Currency),
				subject: fulfillment.ItemSubject{StartID: start.ID, OrgID: start.OrgID, Environment: start.Environment,
					OrderID: start.OrderID, Provider: start.Provider, PaymentID: start.PaymentID}})
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return fmt.Errorf("opening reconciliation item: %w", interpret(err))
			}
		}
		return nil
	})
	return start, err
}

// StartRelease implements fulfillment.PaymentStore.
func (s *Store) StartRelease(ctx context.Context, id int64, detail string) error {
	_, err := s.pool.Exec(ctx, `UPDATE payment_starts SET busy_until = NULL, detail = $2, updated_at = now()
		WHERE id = $1 AND state = 'starting'`, id, detail)
	if err != nil {
		return fmt.Errorf("releasing payment start: %w", interpret(err))
	}
	return nil
}

// StartKnownPaymentID implements fulfillment.PaymentStore.
func (s *Store) StartKnownPaymentID(ctx context.Context, start fulfillment.PaymentStart) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `
		SELECT payment_id FROM inbox_events -- the order's events, as the start matches them
		WHERE id IN (SELECT event_id FROM inbox_event_orders WHERE order_id = $1::uuid)
			AND provider = $2 AND checkout_session_id = $3 AND payment_id IS NOT NULL
		ORDER BY id DESC LIMIT 1`,
		start.OrderID, start.Provider, start.ProviderOrderID).Scan(&id)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("reading provider events: %w", interpret(err))
	}
	return id, nil
}
