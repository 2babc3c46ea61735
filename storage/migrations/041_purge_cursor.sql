-- The purge of raw bodies walks the stored events in id order from a
-- cursor, in place of the partial index inbox_events_raw_body_idx that
-- migration 014 made for it. The index held every event that still has its
-- body, so every webhook stored paid for an entry in it (76 bytes of WAL,
-- a WAL record and two buffers per event, on the hottest write of the
-- service), and its only reader was the purge, once a minute. The cursor
-- costs the webhooks nothing: the purge reads the events past it by
-- primary key, and the purged history behind it is never read again (see
-- purgeRawBodiesSQL in storage/housekeeping.go). The purge's own update of
-- an event becomes HOT too: it changed the column of the index's predicate.
--
-- A table of its own, of one row, rather than a column of the purge's row
-- of housekeeping_tasks: the cursor describes the stored events, not the
-- schedule; the purge is called without a claim (tests, a bare batch), and
-- the task's row is the queue's, whose claims and leases would then wait
-- on a purge's lock of it, or a purge on them.
--
-- last_id: every event up to it has been dealt with — its body is purged,
-- or it is one of held_ids, the events the purge went past while they
-- could not be purged yet (still pending, or locked), which every batch
-- looks at again until their bodies go.
CREATE TABLE inbox_purge_cursor (
    one      boolean  PRIMARY KEY DEFAULT true CHECK (one),
    last_id  bigint   NOT NULL,
    held_ids bigint[] NOT NULL DEFAULT '{}'
);

-- The cursor starts right before the first event that still has its body:
-- every event before it was purged. It stands on the last of those, a
-- purged event, received longer than the retention ago, so that no event
-- with a lower id can still be on its way (see purgeRawBodiesSQL); 0 when
-- there is none. The first event with a body is found with the index, one
-- last time (the ORDER BY makes its entries, the events with a body, the
-- ones read, rather than the primary key's over the purged history).
INSERT INTO inbox_purge_cursor (last_id)
SELECT coalesce(max(id), 0) FROM inbox_events
WHERE id < (SELECT coalesce(min(id), 9223372036854775807) FROM (
    SELECT id FROM inbox_events WHERE raw_body_purged_at IS NULL ORDER BY received_at, id) bodies);

DROP INDEX inbox_events_raw_body_idx;

---- create above / drop below ----

CREATE INDEX inbox_events_raw_body_idx ON inbox_events (received_at, id) WHERE raw_body_purged_at IS NULL;
DROP TABLE inbox_purge_cursor;
