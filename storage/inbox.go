package storage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var (
	_ fulfillment.InboxStore = (*Store)(nil)
	_ fulfillment.InboxWork  = (*Store)(nil)
)

// inboxChannel is the LISTEN/NOTIFY channel an insert trigger signals.
const inboxChannel = "inbox_events"

// inboxTable is the inbox as a leased table (InboxQueue): its queue is
// inbox_work, a narrow row per queued event (inbox_events keeps the events
// themselves, written when stored and when decided). A decision deletes
// its event's row (queueLeasedEvents); an event failed past its attempts is
// decided 'failed' on inbox_events too, with the attempts and the last
// error, and opens a failed_event reconciliation item: one per round of
// attempts (the first, and each after a replay). Its work row stays,
// failed, until the event is replayed.
var inboxTable = newLeasedTable(leasedTable{
	table: "inbox_work",
	noun:  "event",
	failed: func(ctx context.Context, tx pgx.Tx, failed []failedRow, maxAttempts int) error {
		var (
			e        fulfillment.ItemSubject
			attempts int
		)
		return failRows(ctx, tx, `
			UPDATE inbox_events e SET `+inboxFailedSet+`, attempts = w.attempts, last_error = w.last_error
			FROM inbox_work w WHERE w.id = ANY($1) AND e.id = w.id
			RETURNING e.id, e.org_id, e.environment, e.provider, e.attempts,
				(SELECT count(*) FROM inbox_replays r WHERE r.inbox_event_id = e.id)::int`, failed,
			&e.InboxID, []any{&e.InboxID, &e.OrgID, &e.Environment, &e.Provider, &attempts, &e.Round}, func(r failedRow) item {
				detail := fmt.Sprintf("processing failed %d times; last error: %s", maxAttempts, r.cause)
				if r.abandoned {
					detail = fmt.Sprintf("processing did not complete in %d attempts (the worker stopped during each)", attempts)
				}
				return item{kind: fulfillment.ReconFailedEvent, subject: e, detail: detail}
			})
	},
})

// inboxFailedSet assigns the columns of a stored event that its queue
// failed.
const inboxFailedSet = `state = 'failed', decision = 'failed', processed_at = clock_timestamp()`

// inboxReplay is the CTEs that put back in the queue the stored events
// that the query ids returns (one column), as replayed by the SQL
// expression by with the detail expression detail: what an event replay,
// a re-drive and a late match do. Events still pending are left alone.
// "replays" locks them (in id order, as a late match does) and records
// each one's outcome before (its id as "id"): an event another
// transaction put back meanwhile (a person's replay, and a claim of it,
// committed after this statement began) is found pending once its lock is
// free, and left alone — its claim's lease is a processing under way,
// which "requeued" would otherwise clear. (The lock reads the events by
// their ids alone, an init plan: an event updated while the lock waits is
// rechecked against its own row, not a join; see lockSubscriptions.)
// "requeued" gives it a fresh work row (resetting a failed one), and
// "done" sets it pending and returns its id. The work rows are due at the
// transaction's start, all of them: claims, which take the oldest due
// first, take them in id order (what came first is decided first).
func inboxReplay(ids, by, detail string) string {
	return `replays AS (
			INSERT INTO inbox_replays (inbox_event_id, replayed_by, replayed_by_detail, previous_state,
				previous_decision, previous_reason, previous_attempts, previous_last_error)
			SELECT e.id, ` + by + `, ` + detail + `, e.state, e.decision, e.decision_reason, e.attempts, e.last_error
			FROM inbox_events e WHERE e.id = ANY (ARRAY(` + ids + `)) AND e.state <> 'pending'
			ORDER BY e.id
			FOR UPDATE OF e
			RETURNING inbox_event_id AS id
		), requeued AS (
			INSERT INTO inbox_work (id, next_attempt_at) SELECT id, now() FROM replays
			ON CONFLICT (id) DO UPDATE SET state = 'pending', attempts = 0, next_attempt_at = now(),
				lease_owner = NULL, lease_until = NULL, last_error = NULL, processed_at = NULL
		), done AS (
			UPDATE inbox_events e SET state = 'pending', attempts = 0, last_error = NULL
			FROM replays r WHERE e.id = r.id
			RETURNING e.id
		)`
}
