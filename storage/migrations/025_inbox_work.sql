-- The inbox's queue moves out of the stored events into a narrow table of
-- its own. A stored event (some 1.4 KB with its raw body, and five indexes)
-- was written three times: stored, claimed, decided. A claim only moves a
-- lease, yet it rewrote the wide row and added an entry to each of its
-- indexes. Now the claim moves a row of inbox_work (a few dozen bytes, two
-- indexes), and the stored event is written twice: when it is stored and
-- when it is decided.
--
-- inbox_work has a row for every event that is queued ('pending') and for
-- every event the queue failed past its attempts ('failed'); a decision
-- deletes its event's row. attempts and last_error stay on inbox_events
-- as the record of what processing took: they are copied there when the
-- event is decided or failed.
CREATE TABLE inbox_work (
    id              bigint      PRIMARY KEY REFERENCES inbox_events (id) ON DELETE CASCADE,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    lease_owner     text,
    lease_until     timestamptz,
    last_error      text,
    processed_at    timestamptz,
    CONSTRAINT inbox_work_leased_pending CHECK (lease_owner IS NULL OR state = 'pending')
) WITH (fillfactor = 50);

-- Rows churn (inserted, claimed, deleted within seconds): the free half of
-- each page keeps a claim's new row version on its page.
CREATE INDEX inbox_work_claim_idx ON inbox_work (next_attempt_at, id) WHERE state = 'pending';

INSERT INTO inbox_work (id, state, attempts, next_attempt_at, lease_owner, lease_until, last_error)
SELECT id, 'pending', attempts, next_attempt_at, lease_owner, lease_until, last_error
FROM inbox_events WHERE state = 'pending';

DROP INDEX inbox_events_claim_idx;
ALTER TABLE inbox_events
    DROP COLUMN next_attempt_at,
    DROP COLUMN lease_owner,
    DROP COLUMN lease_until;

-- The queues' lease check finds a claimed row by id and owner only: it
-- relies on every statement that moves a row out of 'pending' clearing its
-- lease. That rule is now a constraint of each leased table. Rows written
-- by an earlier version that broke it lose their stale lease first.
UPDATE outbox_messages SET lease_owner = NULL, lease_until = NULL WHERE state <> 'pending' AND lease_owner IS NOT NULL;
UPDATE payment_polls SET lease_owner = NULL, lease_until = NULL WHERE state <> 'pending' AND lease_owner IS NOT NULL;
UPDATE subscription_sweeps SET lease_owner = NULL, lease_until = NULL WHERE state <> 'pending' AND lease_owner IS NOT NULL;
UPDATE housekeeping_tasks SET lease_owner = NULL, lease_until = NULL WHERE state <> 'pending' AND lease_owner IS NOT NULL;
ALTER TABLE outbox_messages ADD CONSTRAINT outbox_messages_leased_pending CHECK (lease_owner IS NULL OR state = 'pending');
ALTER TABLE payment_polls ADD CONSTRAINT payment_polls_leased_pending CHECK (lease_owner IS NULL OR state = 'pending');
ALTER TABLE subscription_sweeps ADD CONSTRAINT subscription_sweeps_leased_pending CHECK (lease_owner IS NULL OR state = 'pending');
ALTER TABLE housekeeping_tasks ADD CONSTRAINT housekeeping_tasks_leased_pending CHECK (lease_owner IS NULL OR state = 'pending');

---- create above / drop below ----

ALTER TABLE outbox_messages DROP CONSTRAINT outbox_messages_leased_pending;
ALTER TABLE payment_polls DROP CONSTRAINT payment_polls_leased_pending;
ALTER TABLE subscription_sweeps DROP CONSTRAINT subscription_sweeps_leased_pending;
ALTER TABLE housekeeping_tasks DROP CONSTRAINT housekeeping_tasks_leased_pending;

ALTER TABLE inbox_events
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ADD COLUMN lease_owner     text,
    ADD COLUMN lease_until     timestamptz;
UPDATE inbox_events e SET attempts = w.attempts, next_attempt_at = w.next_attempt_at,
    lease_owner = w.lease_owner, lease_until = w.lease_until, last_error = w.last_error
FROM inbox_work w WHERE w.id = e.id AND w.state = 'pending';
CREATE INDEX inbox_events_claim_idx ON inbox_events (next_attempt_at, id) WHERE state = 'pending';
DROP TABLE inbox_work;
