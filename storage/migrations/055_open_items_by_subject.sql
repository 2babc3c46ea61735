-- The open items about a stored event, and about an outbox message, each
-- found by a probe: a replayed event's decision, and a retried message's
-- delivery, resolve the items they answer (answeredItems), and without
-- these they were found among all the open items of their kind. Only open
-- items with such a subject are indexed, so the indexes stay the size of
-- the open work, and an item is written to them once when opened and once
-- when resolved. reconciliation_items is the size of what people have to
-- look at; the build holds off its writes for as long as it takes to read
-- the open items once.

CREATE INDEX reconciliation_items_open_event_idx ON reconciliation_items (inbox_event_id)
    WHERE state = 'open' AND inbox_event_id IS NOT NULL;
CREATE INDEX reconciliation_items_open_message_idx ON reconciliation_items (outbox_message_id)
    WHERE state = 'open' AND outbox_message_id IS NOT NULL;

---- create above / drop below ----

DROP INDEX reconciliation_items_open_message_idx;
DROP INDEX reconciliation_items_open_event_idx;
