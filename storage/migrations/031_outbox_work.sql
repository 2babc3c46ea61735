-- The outbox's queue moves out of its messages into a narrow table of its
-- own, as the inbox's did (025). A message (its JSON payload, six indexes)
-- was written three times: queued, claimed, recorded. A claim only moves a
-- lease, yet it rewrote the whole row and added an entry to each of its
-- indexes. Now the claim moves a row of outbox_work (a few dozen bytes, three
-- indexes), and the message is written twice: when it is queued and when its
-- outcome is recorded.
--
-- outbox_work has a row for every message that is queued ('pending') and for
-- every message the queue failed past its attempts ('failed'); recording a
-- delivered or uncertain message deletes its row, and a retry of a message
-- puts it back. attempts and last_error stay on outbox_messages as the record
-- of what its delivery took: they are copied there when it is recorded or
-- failed. sending_since (a request to a destination that does not honour
-- idempotency keys may be under way) moves with the lease: it belongs to the
-- attempt.
CREATE TABLE outbox_work (
    id              bigint      PRIMARY KEY REFERENCES outbox_messages (id) ON DELETE CASCADE,
    destination_id  text        NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    lease_owner     text,
    lease_until     timestamptz,
    sending_since   timestamptz,
    last_error      text,
    processed_at    timestamptz,
    CONSTRAINT outbox_work_leased_pending CHECK (lease_owner IS NULL OR state = 'pending')
) WITH (fillfactor = 50);

-- A destination's dispatcher claims from the first; reclaims (every
-- destination at once) scan the second.
CREATE INDEX outbox_work_due_idx ON outbox_work (destination_id, next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX outbox_work_pending_idx ON outbox_work (next_attempt_at, id) WHERE state = 'pending';

-- Every message inserted pending is queued in the same statement, whichever
-- statement inserts it: one INSERT … SELECT per statement, not per row.
CREATE FUNCTION outbox_messages_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_work (id, destination_id)
    SELECT id, destination_id FROM queued WHERE state = 'pending';
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_messages_queue AFTER INSERT ON outbox_messages
    REFERENCING NEW TABLE AS queued FOR EACH STATEMENT EXECUTE FUNCTION outbox_messages_queue();

INSERT INTO outbox_work (id, destination_id, attempts, next_attempt_at, lease_owner, lease_until, sending_since, last_error)
SELECT id, destination_id, attempts, next_attempt_at, lease_owner, lease_until, sending_since, last_error
FROM outbox_messages WHERE state = 'pending';

DROP INDEX outbox_messages_due_idx;
DROP INDEX outbox_messages_pending_idx;
ALTER TABLE outbox_messages DROP CONSTRAINT outbox_messages_leased_pending;
ALTER TABLE outbox_messages
    DROP COLUMN next_attempt_at,
    DROP COLUMN lease_owner,
    DROP COLUMN lease_until,
    DROP COLUMN sending_since;

---- create above / drop below ----

ALTER TABLE outbox_messages
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN lease_owner     text,
    ADD COLUMN lease_until     timestamptz,
    ADD COLUMN sending_since   timestamptz;
UPDATE outbox_messages m SET attempts = w.attempts, next_attempt_at = w.next_attempt_at, lease_owner = w.lease_owner,
    lease_until = w.lease_until, sending_since = w.sending_since, last_error = w.last_error
FROM outbox_work w WHERE w.id = m.id AND w.state = 'pending' AND m.state = 'pending';
ALTER TABLE outbox_messages ADD CONSTRAINT outbox_messages_leased_pending CHECK (lease_owner IS NULL OR state = 'pending');
CREATE INDEX outbox_messages_due_idx ON outbox_messages (destination_id, next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX outbox_messages_pending_idx ON outbox_messages (next_attempt_at, id) WHERE state = 'pending';
DROP TRIGGER outbox_messages_queue ON outbox_messages;
DROP FUNCTION outbox_messages_queue();
DROP TABLE outbox_work;
