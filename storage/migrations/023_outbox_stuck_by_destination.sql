-- The metrics count failed and uncertain messages by destination at every
-- scrape. The stuck index (org, environment, state) does not hold the
-- destination, so each count read every such message's row; this one
-- answers it from the index alone. Failed messages stay until a person
-- re-drives them, so they can be many.

CREATE INDEX outbox_messages_stuck_destination_idx ON outbox_messages (destination_id, state)
    WHERE state IN ('failed', 'uncertain');

---- create above / drop below ----

DROP INDEX outbox_messages_stuck_destination_idx;
