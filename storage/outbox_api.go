package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.OutboxStore = (*Store)(nil)

// deliveryColumns are what a listing reads of a message (scanDelivery).
// A queued message's attempts, next attempt and last error are its work
// row's (deliveryFrom).
const deliveryColumns = `m.id, m.destination_id, m.topic, m.idempotency_key, m.org_id, m.environment, m.order_id,
	m.line_no, m.required, m.state, coalesce(w.attempts, m.attempts),
	CASE WHEN m.state = 'pending' THEN w.next_attempt_at END, coalesce(m.last_status, 0),
	coalesce(w.last_error, m.last_error, ''), m.created_at, m.processed_at`

// deliveryFrom is the FROM clause of deliveryColumns.
const deliveryFrom = ` FROM outbox_messages m LEFT JOIN outbox_work w ON w.id = m.id AND m.state = 'pending'`

func scanDelivery(r pgx.Row, extra ...any) (fulfillment.Delivery, error) {
	var (
		d       fulfillment.Delivery
		orderID *uuid.UUID
	)
	dest := append([]any{&d.ID, &d.DestinationID, &d.Topic, &d.Key, &d.OrgID, &d.Environment, &orderID,
		&d.LineNo, &d.Required, &d.State, &d.Attempts, &d.NextAttemptAt, &d.LastStatus, &d.LastError,
		&d.CreatedAt, &d.ProcessedAt}, extra...)
	if err := r.Scan(dest...); err != nil {
		return d, err
	}
	if orderID != nil {
		d.OrderID = orderID.String()
	}
	return d, nil
}

// outboxState restricts w to the messages (their columns prefixed by
// prefix) in state, when set, and for the states that are not delivered
// names the small table that holds them: no index of outbox_messages
// covers the state, so that recording a delivery is a HOT update
// (migration 034). The pending messages are the queue's work rows, the
// failed and uncertain ones the rows of outbox_stuck.
func outboxState(w *where, prefix, state string) {
	if state == "" {
		return
	}
	w.eq(prefix+"state", state)
	switch fulfillment.DeliveryState(state) {
	case fulfillment.DeliveryPending:
		w.add(prefix + "id IN (SELECT id FROM outbox_work WHERE state = 'pending')")
	case fulfillment.DeliveryFailed, fulfillment.DeliveryUncertain:
		w.add(prefix + "id IN (SELECT message_id FROM outbox_stuck WHERE state = " + w.arg(state) + ")")
	case fulfillment.DeliveryDelivered:
	}
}

// DeliveryList implements fulfillment.OutboxStore.
func (s *Store) DeliveryList(ctx context.Context, p fulfillment.DeliveryListParams) ([]fulfillment.Delivery, error) {
	var w where
	f := p.Filter
	w.among("m.org_id", f.VisibleOrgs)
	w.eq("m.org_id", f.OrgID)
	w.eq("m.environment", string(f.Environment))
	outboxState(&w, "m.", string(f.State))
	w.eq("m.destination_id", f.DestinationID)
	w.uuidEq("m.order_id", f.OrderID)
	w.below("m.id", p.BeforeID)
	rows, _ := s.pool.Query(ctx, "SELECT "+deliveryColumns+deliveryFrom+w.sql()+
		" ORDER BY m.id DESC LIMIT "+w.arg(p.Limit), w.args...)
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.Delivery, error) { return scanDelivery(r) })
	if err != nil {
		return nil, fmt.Errorf("listing outbox messages: %w", interpret(err))
	}
	return list, nil
}

// orderDeliveries reads the newest MaxHistoryItems messages of an order,
// oldest first, and how many it has in all.
func (s *Store) orderDeliveries(ctx context.Context, orderID string) ([]fulfillment.Delivery, int, error) {
	total := 0
	rows, _ := s.pool.Query(ctx, `
		SELECT * FROM (
			SELECT `+deliveryColumns+`, count(*) OVER ()`+deliveryFrom+`
			WHERE m.order_id = $1 ORDER BY m.id DESC LIMIT $2) newest
		ORDER BY 1`, orderID, fulfillment.MaxHistoryItems)
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.Delivery, error) {
		return scanDelivery(r, &total)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reading the order's outbox messages: %w", interpret(err))
	}
	return list, total, nil
}

// DeliveryGet implements fulfillment.OutboxStore.
func (s *Store) DeliveryGet(ctx context.Context, id int64) (fulfillment.Delivery, error) {
	var payload string
	d, err := scanDelivery(s.pool.QueryRow(ctx, "SELECT "+deliveryColumns+", m.payload::text"+deliveryFrom+" WHERE m.id = $1", id), &payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fulfillment.NotFoundID("outbox message", id)
	}
	if err != nil {
		return d, fmt.Errorf("reading outbox message: %w", interpret(err))
	}
	d.Payload = []byte(payload)
	total := 0
	rows, _ := s.pool.Query(ctx, `
		SELECT attempt, started_at, finished_at, status, outcome, reason, total FROM (
			SELECT attempt, started_at, finished_at, coalesce(status, 0) AS status, outcome, reason,
				count(*) OVER () AS total
			FROM outbox_attempts WHERE message_id = $1 ORDER BY finished_at DESC, attempt DESC LIMIT $2) newest
		ORDER BY finished_at, attempt`, id, fulfillment.MaxHistoryItems)
	d.History, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.DeliveryAttempt, error) {
		var a fulfillment.DeliveryAttempt
		err := r.Scan(&a.Attempt, &a.StartedAt, &a.FinishedAt, &a.Status, &a.Outcome, &a.Reason, &total)
		return a, err
	})
	if err != nil {
		return d, fmt.Errorf("reading delivery attempts: %w", interpret(err))
	}
	d.OmittedAttempts = omitted(total, len(d.History))
	return d, nil
}

// DeliveryRetry implements fulfillment.OutboxStore. One statement decides
// and applies, so two operators retrying at once, or a retry racing the
// dispatcher's claim, cannot both win: a claimed message has a lease owner.
func (s *Store) DeliveryRetry(ctx context.Context, id int64, by string, resend bool) (fulfillment.Delivery, error) {
	var requeued int
	err := s.pool.QueryRow(ctx, `WITH`+outboxRequeue("SELECT $1::bigint",
		`m.state IN ('failed', 'uncertain', 'pending') OR (m.state = 'delivered' AND $3)`,
		`CASE m.state WHEN 'delivered' THEN 'sent again by ' || $2 || ' after it was delivered'
			ELSE 'retried by ' || $2 || ' after: ' || coalesce(m.last_error, 'no error recorded') END`)+`
		SELECT count(*) FROM done`, id, by, resend).Scan(&requeued)
	if err != nil {
		return fulfillment.Delivery{}, fmt.Errorf("retrying outbox message: %w", interpret(err))
	}
	d, err := s.DeliveryGet(ctx, id)
	if err != nil {
		return d, err
	}
	if requeued == 0 {
		switch d.State {
		case fulfillment.DeliveryDelivered:
			return d, fmt.Errorf("%w: message %d was delivered: pass resend to send it again under the same key",
				fulfillment.ErrFailedPrecondition, id)
		case fulfillment.DeliveryPending:
			return d, fmt.Errorf("%w: message %d is being sent at this moment: look at it again once its attempt is recorded",
				fulfillment.ErrFailedPrecondition, id)
		case fulfillment.DeliveryFailed, fulfillment.DeliveryUncertain: // retried by a concurrent call in between
		}
		return d, fmt.Errorf("%w: message %d is %s and cannot be retried", fulfillment.ErrFailedPrecondition, id, d.State)
	}
	s.outboxSignal.committed()
	return d, nil
}

// DeliveryConfirm implements fulfillment.OutboxStore. The message's rows
// are locked first (its work row, then the message), then its order's
// (completeOrders): the order the dispatcher's recording and a retry take
// them in. Two people confirming at once, or a confirmation racing a
// retry, find the message changed once they hold its lock, and all but
// the first change nothing.
func (s *Store) DeliveryConfirm(ctx context.Context, c fulfillment.DeliveryConfirmation) (fulfillment.Delivery, error) {
	var (
		confirmed bool
		q         queued
	)
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var (
			orderID  *string
			required bool
		)
		// A failed message keeps its work row (failed) until retried; an
		// uncertain one has none, nor has a delivered one. The work row is
		// locked first, as a retry (outboxRequeue) locks it before the
		// message: a retry and a confirmation of one failed message wait for
		// each other, and cannot deadlock.
		if _, err := tx.Exec(ctx, `SELECT FROM outbox_work WHERE id = $1 FOR UPDATE`, c.MessageID); err != nil {
			return fmt.Errorf("confirming outbox message delivered: %w", interpret(err))
		}
		// Its open items, failed or uncertain, of every round.
		err := tx.QueryRow(ctx, `
			WITH m AS (
				SELECT id FROM outbox_messages WHERE id = $1 AND state IN ('failed', 'uncertain') FOR NO KEY UPDATE
			), work AS (
				DELETE FROM outbox_work w USING m WHERE w.id = m.id
			), done AS (
				UPDATE outbox_messages o SET state = 'delivered', processed_at = clock_timestamp(), last_error = NULL
				FROM m WHERE o.id = m.id
				RETURNING o.id, o.order_id::text, o.required
			), items AS (
				UPDATE reconciliation_items r SET `+resolvedBy+`
				FROM done WHERE r.kind IN ('failed_delivery', 'uncertain_delivery') AND r.outbox_message_id = done.id
					AND r.state = 'open'
			)
			SELECT order_id, required FROM done`,
			c.MessageID, fulfillment.ResolutionConfirmedDelivered, c.Note, c.Actor, opt(c.ActorDetail)).Scan(&orderID, &required)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("confirming outbox message delivered: %w", interpret(err))
		}
		confirmed = true
		if required && orderID != nil {
			q, err = s.completeOrders(ctx, tx, []string{*orderID})
		}
		return err
	})
	if err != nil {
		return fulfillment.Delivery{}, err
	}
	s.wake(q)
	d, err := s.DeliveryGet(ctx, c.MessageID)
	if err != nil || confirmed {
		return d, err
	}
	switch d.State {
	case fulfillment.DeliveryDelivered:
		return d, fmt.Errorf("%w: message %d is delivered already", fulfillment.ErrFailedPrecondition, c.MessageID)
	case fulfillment.DeliveryPending:
		return d, fmt.Errorf("%w: message %d is queued to be sent: a message is confirmed only once failed or uncertain; "+
			"look at it again once its attempt is recorded", fulfillment.ErrFailedPrecondition, c.MessageID)
	case fulfillment.DeliveryFailed, fulfillment.DeliveryUncertain: // confirmed or retried by a concurrent call in between
	}
	return d, fmt.Errorf("%w: message %d is %s and cannot be confirmed now: look at it again", fulfillment.ErrFailedPrecondition, c.MessageID, d.State)
}

// DestinationStatuses implements fulfillment.OutboxStore. Counted for
// every org, the pending messages are the due index's rows alone; for some
// orgs, each is looked up for its org.
func (s *Store) DestinationStatuses(ctx context.Context, orgs []string) (map[string]fulfillment.DestinationStatus, error) {
	out := map[string]fulfillment.DestinationStatus{}
	rows, _ := s.pool.Query(ctx, `
		SELECT destination_id, count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'failed'),
			count(*) FILTER (WHERE state = 'uncertain')
		FROM (SELECT w.destination_id, w.state FROM outbox_work w
				WHERE w.state = 'pending' AND ($1::text[] IS NULL
					OR EXISTS (SELECT 1 FROM outbox_messages m WHERE m.id = w.id AND m.org_id = ANY($1)))
			UNION ALL SELECT destination_id, state FROM outbox_stuck WHERE $1::text[] IS NULL OR org_id = ANY($1)) m
		GROUP BY destination_id`, orgs)
	err := forEachRow(rows, func(r pgx.Rows) error {
		var (
			id string
			st fulfillment.DestinationStatus
		)
		if err := r.Scan(&id, &st.Pending, &st.Failed, &st.Uncertain); err != nil {
			return err
		}
		out[id] = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("counting outbox messages: %w", interpret(err))
	}
	rows, _ = s.pool.Query(ctx, `SELECT id, disabled_at, coalesce(disabled_reason, '') FROM outbox_destinations WHERE disabled_at IS NOT NULL`)
	err = forEachRow(rows, func(r pgx.Rows) error {
		var id, reason string
		var st fulfillment.DestinationStatus
		if err := r.Scan(&id, &st.DisabledAt, &reason); err != nil {
			return err
		}
		cur := out[id]
		cur.DisabledAt, cur.DisabledReason = st.DisabledAt, reason
		out[id] = cur
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading destinations: %w", interpret(err))
	}
	return out, nil
}

// DestinationDisable implements fulfillment.OutboxStore.
func (s *Store) DestinationDisable(ctx context.Context, id, reason string) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO outbox_destinations AS d (id, disabled_at, disabled_reason) VALUES ($1, now(), $2)
		ON CONFLICT (id) DO UPDATE SET disabled_at = coalesce(d.disabled_at, now()),
			disabled_reason = CASE WHEN d.disabled_at IS NULL THEN EXCLUDED.disabled_reason ELSE d.disabled_reason END,
			updated_at = now()`, id, reason)
	if err != nil {
		return fmt.Errorf("disabling destination: %w", interpret(err))
	}
	return nil
}

// DestinationEnable implements fulfillment.OutboxStore.
func (s *Store) DestinationEnable(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `
		UPDATE outbox_destinations SET disabled_at = NULL, disabled_reason = NULL, updated_at = now()
		WHERE id = $1`, id); err != nil {
		return fmt.Errorf("enabling destination: %w", interpret(err))
	}
	s.outboxSignal.committed()
	return nil
}
