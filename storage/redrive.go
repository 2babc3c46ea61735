package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.RedriveStore = (*Store)(nil)

// redriveMatch builds the FROM and WHERE of the items f matches: stored
// events or outbox messages, oldest first by id.
func redriveMatch(f fulfillment.RedriveFilter) (table string, w where) {
	w.eq("org_id", f.OrgID)
	w.eq("environment", string(f.Environment))
	if f.Target == fulfillment.RedriveEvents {
		inboxState(&w, f.State)
		w.eq("event_type", f.Type)
		w.eq("decision", f.Decision)
		w.eq("endpoint_id", f.EndpointID)
		w.eq("provider", string(f.Provider))
		if !f.ReceivedAfter.IsZero() {
			w.add("received_at >= " + w.arg(f.ReceivedAfter))
		}
		if !f.ReceivedBefore.IsZero() {
			w.add("received_at < " + w.arg(f.ReceivedBefore))
		}
		return "inbox_events", w
	}
	outboxState(&w, "", f.State)
	w.eq("destination_id", f.DestinationID)
	return "outbox_messages", w
}

// redriveSummary is the SQL of a sample's summary, per target.
func redriveSummary(t fulfillment.RedriveTarget) string {
	if t == fulfillment.RedriveEvents {
		return `event_type || ' ' || event_id || coalesce(' (' || decision || ')', '')`
	}
	return `topic || ' → ' || destination_id || coalesce(' (last: ' || left(last_error, 80) || ')', '')`
}

// RedrivePlan implements fulfillment.RedriveStore: a bounded count and the
// oldest items.
func (s *Store) RedrivePlan(ctx context.Context, f fulfillment.RedriveFilter) (fulfillment.RedrivePlan, error) {
	table, w := redriveMatch(f)
	var p fulfillment.RedrivePlan
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+table+w.sql()+` LIMIT `+
		w.arg(fulfillment.MaxRedriveItems+1)+`) m`, w.args...).Scan(&p.Matched); err != nil {
		return p, fmt.Errorf("counting re-drive items: %w", interpret(err))
	}
	table, w = redriveMatch(f)
	rows, err := s.pool.Query(ctx, `SELECT id, `+redriveSummary(f.Target)+`, coalesce(order_id::text, '') FROM `+table+w.sql()+
		` ORDER BY id LIMIT `+w.arg(fulfillment.RedriveSampleSize), w.args...)
	if err != nil {
		return p, fmt.Errorf("sampling re-drive items: %w", interpret(err))
	}
	p.Sample, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.RedriveSample, error) {
		var x fulfillment.RedriveSample
		err := r.Scan(&x.ID, &x.Summary, &x.OrderID)
		return x, err
	})
	if err != nil {
		return p, fmt.Errorf("sampling re-drive items: %w", interpret(err))
	}
	return p, nil
}

const redriveColumns = `id, filter, state, total, applied, skipped, created_by, coalesce(created_by_detail, ''),
	created_at, coalesce(finished_at, 'epoch'::timestamptz), coalesce(cancelled_by, '')`

func scanRedrive(r pgx.Row) (fulfillment.Redrive, error) {
	var (
		d      fulfillment.Redrive
		filter []byte
	)
	if err := r.Scan(&d.ID, &filter, &d.State, &d.Total, &d.Applied, &d.Skipped, &d.CreatedBy, &d.CreatedByDetail,
		&d.CreatedAt, &d.FinishedAt, &d.CancelledBy); err != nil {
		return d, err
	}
	if d.FinishedAt.Unix() == 0 {
		d.FinishedAt = time.Time{} // still running
	}
	if err := json.Unmarshal(filter, &d.Filter); err != nil {
		return d, fmt.Errorf("decoding a re-drive's filter: %w", err)
	}
	return d, nil
}

// RedriveStart implements fulfillment.RedriveStore. The run and its items
// are one transaction: the partial unique index refuses a second running
// run of the org, and the primary key records each item once.
func (s *Store) RedriveStart(ctx context.Context, f fulfillment.RedriveFilter, by, detail string) (fulfillment.Redrive, error) {
	filter, err := json.Marshal(f)
	if err != nil {
		return fulfillment.Redrive{}, fmt.Errorf("encoding a re-drive's filter: %w", err)
	}
	var id int64
	err = s.withTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO redrive_runs (org_id, target, filter, created_by, created_by_detail)
			VALUES ($1, $2, $3, $4, $5) RETURNING id`, f.OrgID, string(f.Target), filter, by, opt(detail)).Scan(&id)
		if err != nil {
			if errors.Is(interpret(err), fulfillment.ErrConflict) {
				return fmt.Errorf("%w: org %s has a re-drive running: wait for it to end, or cancel it",
					fulfillment.ErrFailedPrecondition, f.OrgID)
			}
			return fmt.Errorf("inserting re-drive run: %w", interpret(err))
		}
		table, w := redriveMatch(f)
		runArg := w.arg(id)
		tag, err := tx.Exec(ctx, `INSERT INTO redrive_items (run_id, item_id) SELECT `+runArg+`::bigint, id FROM `+table+w.sql()+
			` ORDER BY id LIMIT `+w.arg(fulfillment.MaxRedriveItems), w.args...)
		if err != nil {
			return fmt.Errorf("recording re-drive items: %w", interpret(err))
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: nothing matches the filter", fulfillment.ErrFailedPrecondition)
		}
		if _, err := tx.Exec(ctx, `UPDATE redrive_runs SET total = $2 WHERE id = $1`, id, tag.RowsAffected()); err != nil {
			return fmt.Errorf("counting re-drive items: %w", interpret(err))
		}
		return nil
	})
	if err != nil {
		return fulfillment.Redrive{}, err
	}
	return s.RedriveGet(ctx, id)
}

// RedriveGet implements fulfillment.RedriveStore.
func (s *Store) RedriveGet(ctx context.Context, id int64) (fulfillment.Redrive, error) {
	d, err := scanRedrive(s.pool.QueryRow(ctx, `SELECT `+redriveColumns+` FROM redrive_runs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fulfillment.NotFoundID("re-drive", id)
	}
	if err != nil {
		return d, fmt.Errorf("reading re-drive %d: %w", id, interpret(err))
	}
	return d, nil
}

// RedriveList implements fulfillment.RedriveStore.
func (s *Store) RedriveList(ctx context.Context, orgs []string, org string) ([]fulfillment.Redrive, error) {
	var w where
	w.among("org_id", orgs)
	w.eq("org_id", org)
	rows, err := s.pool.Query(ctx, `SELECT `+redriveColumns+` FROM redrive_runs`+w.sql()+` ORDER BY id DESC LIMIT `+
		w.arg(fulfillment.RedriveListSize), w.args...)
	if err != nil {
		return nil, fmt.Errorf("listing re-drives: %w", interpret(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.Redrive, error) { return scanRedrive(r) })
	if err != nil {
		return nil, fmt.Errorf("listing re-drives: %w", interpret(err))
	}
	return out, nil
}

// redriveLock is the transaction advisory lock of re-drive run $1 (the
// two-key form, apart from the owners' one-key locks): a cancel holds it
// while it waits for the batch being applied, and a batch of the run is
// not started while it is held. PostgreSQL hands a released lock to its
// waiter, so the cancel comes right after the batch it waited for: no other
// batch of the run can start in between.
const redriveLock = `(1380209238, ($1::bigint & 2147483647)::int)`

// redriveCancelWait bounds how long a cancel waits for the batch being
// applied (PostgreSQL's lock_timeout).
const redriveCancelWait = "10s"

// sqlstateLockNotAvailable is lock_timeout's error.
const sqlstateLockNotAvailable = "55P03"

// RedriveCancel implements fulfillment.RedriveStore.
func (s *Store) RedriveCancel(ctx context.Context, id int64, by string) (fulfillment.Redrive, error) {
	var tag pgconn.CommandTag
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		// The batch being applied is waited for, within a bound: one held
		// up behind other locks keeps the cancel from holding a connection
		// (and its caller) for as long.
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+redriveCancelWait+`'`); err != nil {
			return err
		}
		var err error
		tag, err = tx.Exec(ctx, `
			WITH turn AS MATERIALIZED (SELECT pg_advisory_xact_lock`+redriveLock+`)
			UPDATE redrive_runs SET state = 'cancelled', cancelled_by = $2, finished_at = now()
			FROM turn WHERE id = $1 AND state = 'running'`, id, by)
		return err
	})
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == sqlstateLockNotAvailable {
		return fulfillment.Redrive{}, fmt.Errorf("%w: re-drive %d: the batch being applied has held its items for more than %s; "+
			"nothing was cancelled: try again", fulfillment.ErrFailedPrecondition, id, redriveCancelWait)
	}
	if err != nil {
		return fulfillment.Redrive{}, fmt.Errorf("cancelling re-drive: %w", interpret(err))
	}
	d, err := s.RedriveGet(ctx, id)
	if err != nil {
		return d, err
	}
	if tag.RowsAffected() == 0 {
		return d, fmt.Errorf("%w: re-drive %d is %s already", fulfillment.ErrFailedPrecondition, id, d.State)
	}
	return d, nil
}

// RedriveStep implements fulfillment.RedriveStore: in one transaction, the
// next batch of one running run (locked, so that replicas share runs, not
// batches) is applied set-based, its items marked applied or skipped, and
// the run's counts moved on; the run is done when no item is left.
func (s *Store) RedriveStep(ctx context.Context, batch int) (bool, error) {
	var (
		found  bool
		target fulfillment.RedriveTarget
	)
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var (
			id     int64
			by     string
			actual string
		)
		err := tx.QueryRow(ctx, `SELECT id, target, created_by FROM redrive_runs WHERE state = 'running'
			ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`).Scan(&id, &actual, &by)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claiming a re-drive: %w", interpret(err))
		}
		// A cancel waiting for the run's previous batch goes first.
		var free bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock`+redriveLock, id).Scan(&free); err != nil {
			return fmt.Errorf("claiming a re-drive: %w", interpret(err))
		}
		if !free {
			return nil
		}
		found, target = true, fulfillment.RedriveTarget(actual)
		apply := redriveApplyOutbox
		if target == fulfillment.RedriveEvents {
			apply = redriveApplyEvents
		}
		var applied, skipped, left int64
		if err := tx.QueryRow(ctx, `
			WITH picked AS (
				SELECT item_id FROM redrive_items WHERE run_id = $1 AND state = 'pending'
				ORDER BY item_id LIMIT $2 FOR UPDATE
			)`+apply+`,
			marked AS (
				UPDATE redrive_items i SET state = CASE WHEN i.item_id IN (SELECT id FROM done) THEN 'applied' ELSE 'skipped' END
				FROM picked WHERE i.run_id = $1 AND i.item_id = picked.item_id
				RETURNING i.state
			)
			SELECT count(*) FILTER (WHERE state = 'applied'), count(*) FILTER (WHERE state = 'skipped'),
				(SELECT count(*) FROM redrive_items WHERE run_id = $1 AND state = 'pending') - count(*)
			FROM marked`, id, batch, by).Scan(&applied, &skipped, &left); err != nil {
			return fmt.Errorf("applying a re-drive batch: %w", interpret(err))
		}
		if _, err := tx.Exec(ctx, `UPDATE redrive_runs SET applied = applied + $2, skipped = skipped + $3,
			state = CASE WHEN $4::bigint = 0 THEN 'done' ELSE state END,
			finished_at = CASE WHEN $4::bigint = 0 THEN now() ELSE finished_at END
			WHERE id = $1`, id, applied, skipped, left); err != nil {
			return fmt.Errorf("counting a re-drive batch: %w", interpret(err))
		}
		if target == fulfillment.RedriveEvents && applied > 0 {
			if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, inboxChannel); err != nil {
				return fmt.Errorf("signalling the inbox: %w", interpret(err))
			}
		}
		return nil
	})
	if err != nil || !found {
		return false, err
	}
	if target == fulfillment.RedriveEvents {
		s.inboxSignal.committed()
	} else {
		s.outboxSignal.committed()
	}
	return true, nil
}

// The batch's action per target, as CTEs after "picked" ending in "done"
// (the ids applied). They do what EventReplay and DeliveryRetry do to one
// item, to the batch at once; an item no longer in a state the action
// applies to is left alone (and marked skipped). $3 is who started the run.
var (
	redriveApplyEvents = `, ` + inboxReplay("SELECT item_id FROM picked", "$3", "'re-drive ' || $1::text")
	redriveApplyOutbox = `,` + outboxRequeue("SELECT item_id FROM picked", "m.state IN ('failed', 'uncertain')",
		`'re-driven by ' || $3 || ' (run ' || $1::text || ') after: ' || coalesce(m.last_error, 'no error recorded')`)
)
