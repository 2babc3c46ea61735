package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.EventStore = (*Store)(nil)

// storedEventColumns are what is read of a stored event beside
// inboxSelectList (scanStoredEvent). A raw body that was purged is NULL or
// empty: processing never reads it.
var storedEventColumns = `, received_at, state, coalesce(decision, ''), coalesce(decision_reason, ''),
	order_id, applied_subscription_id, ` + pendingWork("attempts") + `, ` + pendingWork("next_attempt_at") + `,
	coalesce(` + pendingWork("last_error") + `, ''), processed_at, coalesce(octet_length(raw_body), 0) = 0,
	(SELECT count(*) FROM inbox_replays x WHERE x.inbox_event_id = inbox_events.id)`

// pendingWork is the column of a stored event that its work row holds
// while it is pending (the attempts and the last error so far, when the
// next attempt is due), and the stored event's own once it was decided
// (NULL for next_attempt_at).
func pendingWork(column string) string {
	own := "inbox_events." + column
	if column == "next_attempt_at" {
		own = "NULL::timestamptz"
	}
	return "CASE WHEN state = 'pending' THEN coalesce((SELECT w." + column + " FROM inbox_work w WHERE w.id = inbox_events.id), " +
		own + ") ELSE " + own + " END"
}

func scanStoredEvent(r pgx.Row, extra ...any) (fulfillment.StoredEvent, error) {
	var (
		row            inboxRow
		se             fulfillment.StoredEvent
		orderID, subID *uuid.UUID
		replays        int64
	)
	dest := append(row.scanDest(), &se.ReceivedAt, &se.State, &se.Decision, &se.Reason, &orderID, &subID,
		&se.Attempts, &se.NextAttemptAt, &se.LastError, &se.ProcessedAt, &se.RawBodyPurged, &replays)
	if err := r.Scan(append(dest, extra...)...); err != nil {
		return se, err
	}
	var err error
	se.ID = row.ID
	se.Event, err = row.event()
	if orderID != nil {
		se.OrderID = orderID.String()
	}
	if subID != nil {
		se.SubscriptionID = subID.String()
	}
	se.ReplayCount = int(replays)
	return se, err
}

// inboxState adds to w the condition that events are in state, and the
// set of rows that holds the events in that state when one does: the work
// rows of the pending events, the unresolved events (failed, unmatched).
// The set is read first, so a few events in that state are not looked for
// among the whole history.
func inboxState(w *where, state string) {
	if state == "" {
		return
	}
	w.eq("state", state)
	switch fulfillment.InboxState(state) {
	case fulfillment.InboxPending:
		w.add("id IN (SELECT id FROM inbox_work WHERE state = 'pending')")
	case fulfillment.InboxFailed, fulfillment.InboxUnmatched:
		w.add("id IN (SELECT event_id FROM inbox_unresolved WHERE state = " + w.arg(state) + ")")
	case fulfillment.InboxProcessed, fulfillment.InboxIgnored:
	}
}

// inboxOrder adds to w the condition that events are linked to order id
// (none when id is ""), read through the order's links.
func inboxOrder(w *where, id string) {
	if id != "" {
		w.add("id IN (SELECT event_id FROM inbox_event_orders WHERE order_id = " + w.arg(id) + "::uuid)")
	}
}

// EventList implements fulfillment.EventStore. Newest first by id, read
// backwards through the primary key; the filters are conditions on it
// (state and order: through the rows that hold them, inboxState and
// inboxOrder).
func (s *Store) EventList(ctx context.Context, p fulfillment.EventListParams) ([]fulfillment.StoredEvent, error) {
	var w where
	f := p.Filter
	w.among("org_id", f.VisibleOrgs)
	w.eq("org_id", f.OrgID)
	w.eq("environment", string(f.Environment))
	inboxState(&w, string(f.State))
	w.eq("decision", string(f.Decision))
	w.eq("event_type", f.Type)
	w.eq("endpoint_id", f.EndpointID)
	inboxOrder(&w, f.OrderID)
	w.eq("provider", string(f.Provider))
	if !f.ReceivedAfter.IsZero() {
		w.add("received_at >= " + w.arg(f.ReceivedAfter))
	}
	if !f.ReceivedBefore.IsZero() {
		w.add("received_at < " + w.arg(f.ReceivedBefore))
	}
	w.below("id", p.BeforeID)
	rows, _ := s.pool.Query(ctx, "SELECT "+inboxSelectList+storedEventColumns+" FROM inbox_events"+w.sql()+
		" ORDER BY id DESC LIMIT "+w.arg(p.Limit), w.args...)
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.StoredEvent, error) { return scanStoredEvent(r) })
	if err != nil {
		return nil, fmt.Errorf("listing inbox events: %w", interpret(err))
	}
	return list, nil
}

// EventGet implements fulfillment.EventStore.
func (s *Store) EventGet(ctx context.Context, id int64, withBody bool) (fulfillment.StoredEvent, error) {
	var body []byte
	// The body is not even read for a caller who may not see it.
	bodyExpr := "NULL::bytea"
	if withBody {
		bodyExpr = "raw_body"
	}
	se, err := scanStoredEvent(s.pool.QueryRow(ctx, "SELECT "+inboxSelectList+storedEventColumns+", "+bodyExpr+
		" FROM inbox_events WHERE id = $1", id), &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return se, fulfillment.NotFoundID("stored event", id)
	}
	if err != nil {
		return se, fmt.Errorf("reading inbox event: %w", interpret(err))
	}
	if len(body) > 0 {
		se.RawBody = body
	}
	rows, _ := s.pool.Query(ctx, `
		SELECT replayed_by, coalesce(replayed_by_detail, ''), replayed_at, previous_state,
			coalesce(previous_decision, ''), coalesce(previous_reason, ''), previous_attempts,
			coalesce(previous_last_error, '')
		FROM inbox_replays WHERE inbox_event_id = $1 ORDER BY id DESC LIMIT $2`, id, fulfillment.MaxReplaysShown)
	se.Replays, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.EventReplay, error) {
		var x fulfillment.EventReplay
		err := r.Scan(&x.By, &x.ByDetail, &x.At, &x.PreviousState, &x.PreviousDecision, &x.PreviousReason,
			&x.PreviousAttempts, &x.PreviousLastError)
		return x, err
	})
	if err != nil {
		return se, fmt.Errorf("reading event replays: %w", interpret(err))
	}
	return se, nil
}

// EventReplay implements fulfillment.EventStore. The event keeps its
// decision until the processor decides it again (the decision is what the
// event did so far); the replay row keeps what processing said before.
func (s *Store) EventReplay(ctx context.Context, r fulfillment.EventReplayRequest) (fulfillment.StoredEvent, error) {
	var state fulfillment.InboxState
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT state FROM inbox_events WHERE id = $1 FOR UPDATE`, r.ID).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return fulfillment.NotFoundID("stored event", r.ID)
		}
		if err != nil {
			return fmt.Errorf("locking inbox event: %w", interpret(err))
		}
		if state == fulfillment.InboxPending {
			return fulfillment.ReplayPending(r.ID)
		}
		b := &pgx.Batch{}
		b.Queue(`WITH `+inboxReplay("SELECT $1::bigint", "$2", "$3")+` SELECT count(*) FROM done`,
			r.ID, r.Actor, opt(r.ActorDetail))
		// Workers of other processes listen; the insert trigger does not
		// fire on an update.
		b.Queue(`SELECT pg_notify($1, '')`, inboxChannel)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("replaying inbox event: %w", interpret(err))
		}
		return nil
	})
	if err != nil {
		return fulfillment.StoredEvent{}, err
	}
	s.inboxSignal.committed()
	return s.EventGet(ctx, r.ID, false)
}
