-- A NOTIFY takes a database-wide lock until its transaction commits, so a
-- trigger notifying for every inserted row serialized every inbox insert.
-- The inbox insert now notifies once per group commit instead, and wakes
-- in-process workers directly.

DROP TRIGGER inbox_events_notify ON inbox_events;
DROP FUNCTION inbox_events_notify();

---- create above / drop below ----

CREATE FUNCTION inbox_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('inbox_events', '');
    RETURN NULL;
END $$;
CREATE TRIGGER inbox_events_notify AFTER INSERT ON inbox_events
    FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION inbox_events_notify();
