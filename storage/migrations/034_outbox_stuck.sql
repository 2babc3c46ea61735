-- The update that records a message's delivery (its state, when, its
-- attempts and last status) can be HOT — a new version on the same page,
-- no new index entries — when no index covers a column it changes and the
-- page has room, as migration 033 did for orders. Three indexes covered
-- the state: the list by state, and the failed and uncertain messages by
-- org and by destination, which the reconciliation summary, the metrics
-- and the destinations' statuses read. Every delivery added an entry to
-- each of the message's six indexes.
--
-- The failed and uncertain messages are now rows of their own, which a
-- trigger keeps with every change of a message, whoever makes it; the
-- pending ones are the queue's work rows (outbox_work). A delivered
-- message has neither.
CREATE TABLE outbox_stuck (
    message_id     bigint PRIMARY KEY REFERENCES outbox_messages (id) ON DELETE CASCADE,
    org_id         text   NOT NULL,
    environment    text   NOT NULL,
    destination_id text   NOT NULL,
    state          text   NOT NULL CHECK (state IN ('failed', 'uncertain'))
);

CREATE FUNCTION outbox_stuck_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('failed', 'uncertain') THEN
        INSERT INTO outbox_stuck (message_id, org_id, environment, destination_id, state)
        VALUES (NEW.id, NEW.org_id, NEW.environment, NEW.destination_id, NEW.state)
        ON CONFLICT (message_id) DO UPDATE SET org_id = EXCLUDED.org_id, environment = EXCLUDED.environment,
            destination_id = EXCLUDED.destination_id, state = EXCLUDED.state;
    ELSE
        DELETE FROM outbox_stuck WHERE message_id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_stuck_insert AFTER INSERT ON outbox_messages FOR EACH ROW
    WHEN (NEW.state IN ('failed', 'uncertain'))
    EXECUTE FUNCTION outbox_stuck_follow();
CREATE TRIGGER outbox_stuck_update AFTER UPDATE ON outbox_messages FOR EACH ROW
    WHEN (OLD.state IN ('failed', 'uncertain') OR NEW.state IN ('failed', 'uncertain'))
    EXECUTE FUNCTION outbox_stuck_follow();

INSERT INTO outbox_stuck (message_id, org_id, environment, destination_id, state)
SELECT id, org_id, environment, destination_id, state FROM outbox_messages WHERE state IN ('failed', 'uncertain');

DROP INDEX outbox_messages_list_idx;
DROP INDEX outbox_messages_stuck_idx;
DROP INDEX outbox_messages_stuck_destination_idx;

-- Room on each page for the new versions of its messages' updates (a
-- message, with its payload, is several times the size of an order).
ALTER TABLE outbox_messages SET (fillfactor = 70);

---- create above / drop below ----

ALTER TABLE outbox_messages RESET (fillfactor);
CREATE INDEX outbox_messages_stuck_destination_idx ON outbox_messages (destination_id, state)
    WHERE state IN ('failed', 'uncertain');
CREATE INDEX outbox_messages_stuck_idx ON outbox_messages (org_id, environment, state)
    WHERE state IN ('failed', 'uncertain');
CREATE INDEX outbox_messages_list_idx ON outbox_messages (state, id);
DROP TRIGGER outbox_stuck_update ON outbox_messages;
DROP TRIGGER outbox_stuck_insert ON outbox_messages;
DROP FUNCTION outbox_stuck_follow();
DROP TABLE outbox_stuck;
