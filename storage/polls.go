package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.PollWork = (*Store)(nil)

// pollTable is the status poller's queue (PollQueue): one row per started payment. A
// poll that used its attempts is failed. When its last attempt got no
// answer (answered_attempt, set by PollRecord, is behind attempts) it
// opens a poll_failing item about its payment start, in the transaction
// that fails it; when the provider answered it — a payer who never paid
// leaves a payment without an outcome, which is no anomaly — it opens
// none. The item's key is the start, unique in the database, so a poll
// opens one whichever path (Retry, or the claim failing it abandoned)
// and however many replicas race.
var pollTable = newLeasedTable(leasedTable{
	table: "payment_polls",
	noun:  "poll",
	// An attempt handed back is not counted: an answer it got counts for
	// the attempt before, so that the next attempt starts unanswered.
	releaseSet: [][2]string{{"answered_attempt", "least(answered_attempt, greatest(attempts - 1, 0))"}},
	// The rule of fulfillment.FailedPoll, in SQL for the polls the claim
	// fails in bulk: their last attempt never completed, so it was not
	// answered unless its answer was stored before the worker stopped.
	abandoned: []string{`
		INSERT INTO reconciliation_items (kind, org_id, environment, order_id, payment_start_id, provider,
			attempt_ref, payment_id, amount, currency, detail, dedupe_key)
		SELECT 'poll_failing', s.org_id, s.environment, s.order_id, s.id, s.provider, s.payment_id, s.payment_id,
			s.minor_units, s.currency,
			format('the status poll of payment %s at endpoint %s gave up after %s, %s, the last never completing '
				|| '(the worker stopped during it); last recorded error: %s. ',
				coalesce(s.payment_id, 'unknown'), s.endpoint_id,
				a.attempts || CASE WHEN a.attempts = 1 THEN ' attempt' ELSE ' attempts' END,
				CASE WHEN p.answered_attempt = 0 AND a.attempts = 1 THEN 'unanswered'
					WHEN p.answered_attempt = 0 THEN 'none of them answered'
					ELSE format('the last %s unanswered (the provider last answered attempt %s)',
						a.attempts - p.answered_attempt, p.answered_attempt) END,
				coalesce(nullif(left(regexp_replace(p.last_error, '[[:cntrl:]]', ' ', 'g'), 300), ''), 'none'))
				|| '` + strings.ReplaceAll(fulfillment.PollFailingAdvice, "'", "''") + `',
			'` + fulfillment.StartKeyPrefix + `' || s.id
		FROM abandoned a JOIN payment_polls p ON p.id = a.id JOIN payment_starts s ON s.id = p.start_id
		WHERE p.answered_attempt < a.attempts
		ON CONFLICT ON CONSTRAINT reconciliation_items_dedupe_key DO NOTHING`},
	failed: func(ctx context.Context, tx pgx.Tx, ids []int64, causes []string, _ int) error {
		for i, id := range ids { // rare: one poll per started payment
			if err := openPollFailing(ctx, tx, id, causes[i]); err != nil {
				return err
			}
		}
		return nil
	},
})

// openPollFailing opens the poll_failing item of poll id, failed past its
// attempts with cause, when its last attempt got no answer.
func openPollFailing(ctx context.Context, tx pgx.Tx, id int64, cause string) error {
	p := fulfillment.FailedPoll{LastError: cause}
	var startID int64
	err := tx.QueryRow(ctx, `
		SELECT p.start_id, p.attempts, p.answered_attempt, s.endpoint_id, coalesce(s.payment_id, '')
		FROM payment_polls p JOIN payment_starts s ON s.id = p.start_id WHERE p.id = $1`, id).
		Scan(&startID, &p.Attempts, &p.Answered, &p.EndpointID, &p.PaymentID)
	if err != nil {
		return fmt.Errorf("reading failed status poll: %w", interpret(err))
	}
	if !p.Failing() {
		return nil
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO reconciliation_items (kind, org_id, environment, order_id, payment_start_id, provider,
			attempt_ref, payment_id, amount, currency, detail, dedupe_key)
		SELECT $2, org_id, environment, order_id, id, provider, payment_id, payment_id, minor_units, currency, $3, $4
		FROM payment_starts WHERE id = $1
		ON CONFLICT ON CONSTRAINT reconciliation_items_dedupe_key DO NOTHING`,
		startID, fulfillment.ReconPollFailing, p.Detail(),
		fulfillment.ItemKey(fulfillment.ReconPollFailing, fulfillment.ItemSubject{StartID: startID}))
	if err != nil {
		return fmt.Errorf("opening poll_failing item: %w", interpret(err))
	}
	return nil
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
func (s *Store) PollRecord(ctx context.Context, id int64, owner string, ev fulfillment.ProviderEvent, raw []byte, done bool) error {
	stored := false
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		// An event is the provider's answer to this attempt.
		var held bool
		err := tx.QueryRow(ctx, `UPDATE payment_polls SET answered_attempt = CASE WHEN $3 THEN attempts ELSE answered_attempt END
			WHERE `+leaseHeld("ARRAY[$1::bigint]", "$2")+` RETURNING true`,
			id, owner, ev.EventID != "").Scan(&held)
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
