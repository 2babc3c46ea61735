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

// pollTable is the status poller's queue (PollQueue): one row per started payment. A
// poll that used its attempts is failed. When its last attempt got no
// answer (answered_attempt, set by PollRecord, is behind attempts), or the
// provider's last answer was that the payer's money is held
// (answered_held), it opens a poll_failing item about its payment start,
// in the transaction that fails it; when the provider answered that the
// payment is not paid yet — a payer who never paid leaves a payment
// without an outcome, which is no anomaly — it opens none. The item's key is the start, unique in the database, so a poll
// opens one whichever path (Retry, or the claim failing it abandoned)
// and however many replicas race.
var pollTable = newLeasedTable(leasedTable{
	table: "payment_polls",
	noun:  "poll",
	// An attempt handed back is not counted: an answer it got counts for
	// the attempt before, so that the next attempt starts unanswered.
	releaseSet: [][2]string{{"answered_attempt", "least(answered_attempt, greatest(attempts - 1, 0))"}},
	failed:     openPollsFailing,
})

// openPollsFailing opens, in one statement, the poll_failing items of the
// failed polls whose last attempt got no answer (fulfillment.FailedPoll),
// after reading each one's poll and started payment in one statement.
func openPollsFailing(ctx context.Context, tx pgx.Tx, failed []failedRow, _ int) error {
	ids := make([]int64, len(failed))
	byID := make(map[int64]failedRow, len(failed))
	for i, r := range failed {
		ids[i], byID[r.id] = r.id, r
	}
	rows, _ := tx.Query(ctx, `
		SELECT p.id, p.attempts, p.answered_attempt, coalesce(p.answered_held, ''), s.endpoint_id, coalesce(s.payment_id, ''),
			s.id, s.org_id, s.environment, s.order_id::text, s.provider, s.minor_units, s.currency
		FROM payment_polls p JOIN payment_starts s ON s.id = p.start_id WHERE p.id = ANY($1) ORDER BY p.id`, ids)
	var (
		items    []item
		id       int64
		p        fulfillment.FailedPoll
		s        fulfillment.ItemSubject
		minor    int64
		currency string
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &p.Attempts, &p.Answered, &p.Held, &p.EndpointID, &p.PaymentID,
		&s.StartID, &s.OrgID, &s.Environment, &s.OrderID, &s.Provider, &minor, &currency}, func() error {
		p.LastError, p.Abandoned = byID[id].cause, byID[id].abandoned
		if p.Failing() {
			s.AttemptRef, s.PaymentID = p.PaymentID, p.PaymentID
			items = append(items, item{kind: fulfillment.ReconPollFailing, subject: s,
				amount: fulfillment.MinorAmount(minor, currency), detail: p.Detail()})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading failed status polls: %w", interpret(err))
	}
	_, err = openItems(ctx, tx, items)
	return err
}

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

// PollLoad implements fulfillment.PollWork. An outcome is known once the
// started payment's attempt is anything but created.
func (s *Store) PollLoad(ctx context.Context, id int64, owner string) (fulfillment.PaymentStart, bool, error) {
	var known bool
	start, err := scanStart(s.pool.QueryRow(ctx, `SELECT `+startColumns+` FROM payment_starts
		WHERE id = (SELECT start_id FROM payment_polls WHERE `+leaseHeld("ARRAY[$1::bigint]", "$2")+`)`, id, owner))
	if errors.Is(err, pgx.ErrNoRows) {
		return start, false, pollTable.lost(id)
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
func (s *Store) PollRecord(ctx context.Context, id int64, owner string, a fulfillment.PollAnswer, done bool) error {
	ev, raw := a.Event, a.Raw
	stored := false
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		// An event is the provider's answer to this attempt, and says
		// whether the money is held now.
		var leased bool
		err := tx.QueryRow(ctx, `UPDATE payment_polls SET answered_attempt = CASE WHEN $3 THEN attempts ELSE answered_attempt END,
				answered_held = CASE WHEN $3 THEN $4 ELSE answered_held END
			WHERE `+leaseHeld("ARRAY[$1::bigint]", "$2")+` RETURNING true`,
			id, owner, ev.EventID != "", opt(a.Held)).Scan(&leased)
		if errors.Is(err, pgx.ErrNoRows) {
			return pollTable.lost(id)
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
