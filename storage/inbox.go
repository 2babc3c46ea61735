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

// inboxTable is the inbox as a leased table (InboxQueue). An event failed past its
// attempts is decided 'failed' and opens a failed_event reconciliation item.
var inboxTable = newLeasedTable(leasedTable{
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
