-- How many times a person (or a re-drive) put a message back in the queue
-- after its delivery ended failed, uncertain or delivered: each is a new
-- round of attempts, and a round that fails, or ends uncertain, opens an
-- item of its own (fulfillment.ItemSubject.Round). A retry that only
-- hurries a pending message is not counted. The default is a constant:
-- adding the column rewrites nothing.

ALTER TABLE outbox_messages ADD COLUMN retries integer NOT NULL DEFAULT 0;

-- A message still pending that has a delivery item was retried (or sent
-- again) after a round that opened it: only a retry or a re-drive puts a
-- message that ended back in the queue. Its round is counted as the first
-- after a retry, so that it opens an item of its own if it fails or ends
-- uncertain (at 0 it would take the key of the item there already,
-- outbox|<id>, and open none), and answers that item once delivered. Only
-- those messages are written: the queue's pending work rows, each looked
-- up by its item's key (every key before this migration names the
-- message alone). The others keep 0: a failed, uncertain or delivered
-- message's next retry counts from there.
UPDATE outbox_messages m SET retries = 1
FROM outbox_work w
WHERE w.state = 'pending' AND m.id = w.id
    AND EXISTS (SELECT 1 FROM reconciliation_items r
        WHERE r.kind IN ('failed_delivery', 'uncertain_delivery') AND r.dedupe_key = 'outbox|' || m.id);

---- create above / drop below ----

ALTER TABLE outbox_messages DROP COLUMN retries;
