-- Operating the service: resolving reconciliation items (how, by whom,
-- why), replaying stored events, and the partial indexes the
-- reconciliation summary counts through.

-- How an item was resolved. resolved_by is the calling token's name (it
-- existed, unused, since 002); resolved_by_detail is free text the person
-- adds (their own name, a ticket). An open item has none of them; a
-- resolved one has its kind, time and resolver. Items are never deleted.
ALTER TABLE reconciliation_items
    ADD COLUMN resolution         text CHECK (resolution IN (
                                      'refunded', 'fulfilled_manually', 'confirmed_duplicate_delivery',
                                      'revoked', 'retried', 'no_action')),
    ADD COLUMN resolved_by_detail text,
    ADD CONSTRAINT reconciliation_items_resolution CHECK (
        state = 'resolved' OR (resolution IS NULL AND resolved_at IS NULL AND resolved_by IS NULL
                               AND resolution_note IS NULL AND resolved_by_detail IS NULL)),
    ADD CONSTRAINT reconciliation_items_resolved CHECK (
        state = 'open' OR resolution IS NULL OR (resolved_at IS NOT NULL AND resolved_by IS NOT NULL));

-- One row per replay of an inbox event: who asked, when, and what the
-- event's processing said before it was put back in the queue.
CREATE TABLE inbox_replays (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inbox_event_id      bigint      NOT NULL REFERENCES inbox_events (id),
    replayed_by         text        NOT NULL,
    replayed_by_detail  text,
    replayed_at         timestamptz NOT NULL DEFAULT now(),
    previous_state      text        NOT NULL,
    previous_decision   text,
    previous_reason     text,
    previous_attempts   int         NOT NULL,
    previous_last_error text
);
CREATE INDEX inbox_replays_event_idx ON inbox_replays (inbox_event_id, id);

-- The summary's counts read small partial indexes, never the history.
CREATE INDEX inbox_events_failed_idx ON inbox_events (org_id, environment) WHERE state = 'failed';
CREATE INDEX outbox_messages_stuck_idx ON outbox_messages (org_id, environment, state)
    WHERE state IN ('failed', 'uncertain');
CREATE INDEX orders_paid_unfulfilled_idx ON orders (org_id, environment)
    WHERE paid_at IS NOT NULL AND state IN ('paid', 'fulfilling', 'on_hold');
CREATE INDEX reconciliation_items_open_org_idx ON reconciliation_items (org_id, environment, kind, created_at)
    WHERE state = 'open';

---- create above / drop below ----

DROP INDEX reconciliation_items_open_org_idx;
DROP INDEX orders_paid_unfulfilled_idx;
DROP INDEX outbox_messages_stuck_idx;
DROP INDEX inbox_events_failed_idx;
DROP TABLE inbox_replays;
ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_resolved,
    DROP CONSTRAINT reconciliation_items_resolution,
    DROP COLUMN resolved_by_detail,
    DROP COLUMN resolution;
