package storage

import (
	"context"
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

// inboxQueue is the inbox as a leased queue. An event failed past its
// attempts is decided 'failed' and opens a failed_event reconciliation item.
var inboxQueue = newLeasedTable(leasedTable{
	table:     "inbox_events",
	noun:      "event",
	failedSet: [][2]string{{"decision", "'failed'"}},
	// The key is fulfillment.ItemKey's for a failed_event item, built in
	// SQL for the events the claim fails in bulk.
	abandoned: `
		INSERT INTO reconciliation_items (kind, org_id, environment, inbox_event_id, provider, detail, dedupe_key)
		SELECT 'failed_event', e.org_id, e.environment, e.id, e.provider,
			'processing did not complete in ' || a.attempts || ' attempts (the worker stopped during each)',
			'` + fulfillment.FailedEventKeyPrefix + `' || e.id
		FROM abandoned a JOIN inbox_events e ON e.id = a.id
		ON CONFLICT ON CONSTRAINT reconciliation_items_dedupe_key DO NOTHING`,
	failed: func(ctx context.Context, tx pgx.Tx, id int64, cause string, maxAttempts int) error {
		_, err := tx.Exec(ctx, `
			INSERT INTO reconciliation_items (kind, org_id, environment, inbox_event_id, provider, detail, dedupe_key)
			SELECT 'failed_event', org_id, environment, id, provider, $2, $3
			FROM inbox_events WHERE id = $1
			ON CONFLICT ON CONSTRAINT reconciliation_items_dedupe_key DO NOTHING`,
			id, fmt.Sprintf("processing failed %d times; last error: %s", maxAttempts, cause),
			fulfillment.ItemKey(fulfillment.ReconFailedEvent, fulfillment.ItemSubject{InboxID: id}))
		if err != nil {
			return fmt.Errorf("opening failed_event item: %w", interpret(err))
		}
		return nil
	},
})

// InboxClaim implements fulfillment.InboxWork. Claiming pushes
// next_attempt_at to the end of the lease, so leased events drop out of the
// claim scan; the partial index holds pending events only, so a claim never
// scans processed history. An event whose lease ran out is claimed only when
// its owner is not live (its process died or lost its liveness lock): a
// live worker keeps its events however long it takes, and a live owner takes
// back its own whose lease ran out when they are not in flight. A due event that has
// used its attempts without completing — its worker died each time, which
// InboxRetry never saw — is failed here, with a failed_event item, instead
// of being leased again.
func (s *Store) InboxClaim(ctx context.Context, owner string, limit int, lease time.Duration, maxAttempts int, inFlight []int64) ([]fulfillment.InboxClaim, error) {
	return s.claim(ctx, inboxQueue, owner, limit, lease, maxAttempts, inFlight)
}

// InboxRelease implements fulfillment.InboxWork.
func (s *Store) InboxRelease(ctx context.Context, owner string) (int, error) {
	return s.release(ctx, inboxQueue, owner)
}

// InboxReclaim implements fulfillment.InboxWork: the events leased to
// owners that are not live are due at once, whatever their lease.
func (s *Store) InboxReclaim(ctx context.Context) (int, error) {
	return s.reclaim(ctx, inboxQueue)
}

// InboxRetry implements fulfillment.InboxWork.
func (s *Store) InboxRetry(ctx context.Context, id int64, owner, cause string, next time.Time, maxAttempts int) (bool, error) {
	return s.retry(ctx, inboxQueue, id, owner, cause, next, maxAttempts)
}

// InboxListen implements fulfillment.InboxWork. Inserts committed by this
// store wake in-process listeners directly; inserts by other replicas
// arrive as a NOTIFY.
func (s *Store) InboxListen(ctx context.Context, wake func()) error {
	s.inboxSignal.listen(ctx, wake)
	return nil
}
