-- Housekeeping: recurring chores that one replica runs about once per
-- interval — paid orders past the fulfilment SLA get a paid_not_fulfilled
-- item; the raw bodies of old, settled events are purged.

-- A purged event keeps its normalized fields and its decision; its raw
-- body is gone, and when it went is recorded. A body is missing only when
-- it was purged.
ALTER TABLE inbox_events
    ALTER COLUMN raw_body DROP NOT NULL,
    ADD COLUMN raw_body_purged_at timestamptz,
    ADD CONSTRAINT inbox_events_raw_body_purged CHECK ((raw_body IS NULL) = (raw_body_purged_at IS NOT NULL));

-- The purge scans the events that still have a body, oldest first: the
-- index holds the retention period's events (and the pending ones), never
-- the purged history.
CREATE INDEX inbox_events_raw_body_idx ON inbox_events (received_at, id) WHERE raw_body_purged_at IS NULL;

-- The SLA check scans the orders waiting for their fulfilment, oldest
-- payment first: a handful at any time.
CREATE INDEX orders_awaiting_fulfilment_idx ON orders (paid_at, id)
    WHERE paid_at IS NOT NULL AND state IN ('paid', 'fulfilling');

-- The housekeeper's queue: one row per task, due again an interval after
-- each run (a leased queue like the inbox's; see worker.NewHousekeeper).
-- A task is never failed for good: attempts restart at every run.
CREATE TABLE housekeeping_tasks (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task            text        NOT NULL UNIQUE CHECK (task IN ('fulfilment_sla', 'raw_body_purge')),
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done', 'failed')),
    attempts        int         NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_owner     text,
    lease_until     timestamptz,
    last_error      text,
    processed_at    timestamptz,
    -- The last completed run: when, and how many things it did (items
    -- opened, bodies purged).
    last_run_at     timestamptz,
    last_count      bigint
);
CREATE INDEX housekeeping_tasks_claim_idx ON housekeeping_tasks (next_attempt_at, id) WHERE state = 'pending';
INSERT INTO housekeeping_tasks (task) VALUES ('fulfilment_sla'), ('raw_body_purge');

---- create above / drop below ----

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM inbox_events WHERE raw_body IS NULL) THEN
        RAISE EXCEPTION 'raw bodies were purged: the previous schema cannot hold events without one';
    END IF;
END $$;
DROP TABLE housekeeping_tasks;
DROP INDEX orders_awaiting_fulfilment_idx;
DROP INDEX inbox_events_raw_body_idx;
ALTER TABLE inbox_events
    DROP CONSTRAINT inbox_events_raw_body_purged,
    DROP COLUMN raw_body_purged_at,
    ALTER COLUMN raw_body SET NOT NULL;
