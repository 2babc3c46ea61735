-- The update that records an event's decision (its state, decision, order,
-- subscription, when) can be HOT — a new version on the same page, no new
-- index entries, and only the changed bytes in the WAL — when no index
-- covers a column it changes and the page has room, as migrations 033 and
-- 034 did for orders and outbox messages. Six indexes covered what a
-- decision changes: the failed events by org, the unmatched events by
-- merchant order id, checkout session and subscription (late matching),
-- the events by order, and the events by subscription (which nothing
-- read). Every decision added an entry to the event's four or five
-- indexes and wrote the whole row, body included, again.
--
-- The failed and unmatched events are now rows of inbox_unresolved, and
-- the events linked to an order rows of inbox_event_orders, both kept by
-- triggers with every change of an event, whoever makes it. A decision
-- that links no order and leaves the event neither failed nor unmatched
-- calls no trigger function (the triggers' WHEN conditions).
CREATE TABLE inbox_unresolved (
    event_id            bigint      PRIMARY KEY REFERENCES inbox_events (id) ON DELETE CASCADE,
    org_id              text        NOT NULL,
    environment         text        NOT NULL,
    provider            text        NOT NULL,
    state               text        NOT NULL CHECK (state IN ('failed', 'unmatched')),
    received_at         timestamptz NOT NULL,
    merchant_order_id   text,
    checkout_session_id text,
    subscription_id     text
);

-- What late matching looks an unmatched event up by, and the failed events
-- by org (the reconciliation summary, re-drives).
CREATE INDEX inbox_unresolved_order_idx ON inbox_unresolved (org_id, environment, merchant_order_id)
    WHERE state = 'unmatched' AND merchant_order_id IS NOT NULL;
CREATE INDEX inbox_unresolved_session_idx ON inbox_unresolved (org_id, environment, checkout_session_id)
    WHERE state = 'unmatched' AND checkout_session_id IS NOT NULL;
CREATE INDEX inbox_unresolved_subscription_idx ON inbox_unresolved (org_id, environment, provider, subscription_id)
    WHERE state = 'unmatched' AND subscription_id IS NOT NULL;
CREATE INDEX inbox_unresolved_failed_idx ON inbox_unresolved (org_id, environment)
    WHERE state = 'failed';

CREATE FUNCTION inbox_unresolved_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('failed', 'unmatched') THEN
        INSERT INTO inbox_unresolved (event_id, org_id, environment, provider, state, received_at,
            merchant_order_id, checkout_session_id, subscription_id)
        VALUES (NEW.id, NEW.org_id, NEW.environment, NEW.provider, NEW.state, NEW.received_at,
            NEW.merchant_order_id, NEW.checkout_session_id, NEW.subscription_id)
        ON CONFLICT (event_id) DO UPDATE SET org_id = EXCLUDED.org_id, environment = EXCLUDED.environment,
            provider = EXCLUDED.provider, state = EXCLUDED.state, received_at = EXCLUDED.received_at,
            merchant_order_id = EXCLUDED.merchant_order_id, checkout_session_id = EXCLUDED.checkout_session_id,
            subscription_id = EXCLUDED.subscription_id;
    ELSE
        DELETE FROM inbox_unresolved WHERE event_id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER inbox_unresolved_insert AFTER INSERT ON inbox_events FOR EACH ROW
    WHEN (NEW.state IN ('failed', 'unmatched'))
    EXECUTE FUNCTION inbox_unresolved_follow();
CREATE TRIGGER inbox_unresolved_update AFTER UPDATE ON inbox_events FOR EACH ROW
    WHEN (OLD.state IN ('failed', 'unmatched') OR NEW.state IN ('failed', 'unmatched'))
    EXECUTE FUNCTION inbox_unresolved_follow();

-- An order's events, for its timeline. No foreign keys: each would lock
-- the row it names with every link (WAL on the hot path), and the trigger
-- removes an event's link with the event.
CREATE TABLE inbox_event_orders (
    order_id uuid   NOT NULL,
    event_id bigint NOT NULL,
    PRIMARY KEY (order_id, event_id)
);

CREATE FUNCTION inbox_event_orders_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.order_id IS NOT NULL THEN
        DELETE FROM inbox_event_orders WHERE order_id = OLD.order_id AND event_id = OLD.id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.order_id IS NOT NULL THEN
        INSERT INTO inbox_event_orders (order_id, event_id) VALUES (NEW.order_id, NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER inbox_event_orders_insert AFTER INSERT ON inbox_events FOR EACH ROW
    WHEN (NEW.order_id IS NOT NULL)
    EXECUTE FUNCTION inbox_event_orders_follow();
CREATE TRIGGER inbox_event_orders_update AFTER UPDATE ON inbox_events FOR EACH ROW
    WHEN (OLD.order_id IS DISTINCT FROM NEW.order_id)
    EXECUTE FUNCTION inbox_event_orders_follow();
CREATE TRIGGER inbox_event_orders_delete AFTER DELETE ON inbox_events FOR EACH ROW
    WHEN (OLD.order_id IS NOT NULL)
    EXECUTE FUNCTION inbox_event_orders_follow();

INSERT INTO inbox_unresolved (event_id, org_id, environment, provider, state, received_at,
    merchant_order_id, checkout_session_id, subscription_id)
SELECT id, org_id, environment, provider, state, received_at, merchant_order_id, checkout_session_id, subscription_id
FROM inbox_events WHERE state IN ('failed', 'unmatched');
INSERT INTO inbox_event_orders (order_id, event_id)
SELECT order_id, id FROM inbox_events WHERE order_id IS NOT NULL;

DROP INDEX inbox_events_failed_idx;
DROP INDEX inbox_events_unmatched_order_idx;
DROP INDEX inbox_events_unmatched_session_idx;
DROP INDEX inbox_events_unmatched_subscription_idx;
DROP INDEX inbox_events_order_idx;
DROP INDEX inbox_events_subscription_idx;

-- Room on each page for the decided version of each of its events: an
-- event is decided once, soon after it is stored, while its page holds
-- the events stored with it.
ALTER TABLE inbox_events SET (fillfactor = 50);

---- create above / drop below ----

ALTER TABLE inbox_events RESET (fillfactor);
CREATE INDEX inbox_events_subscription_idx ON inbox_events (applied_subscription_id, id)
    WHERE applied_subscription_id IS NOT NULL;
CREATE INDEX inbox_events_order_idx ON inbox_events (order_id, id) WHERE order_id IS NOT NULL;
CREATE INDEX inbox_events_unmatched_subscription_idx ON inbox_events (org_id, environment, provider, subscription_id)
    WHERE state = 'unmatched' AND subscription_id IS NOT NULL;
CREATE INDEX inbox_events_unmatched_session_idx ON inbox_events (org_id, environment, checkout_session_id)
    WHERE state = 'unmatched' AND checkout_session_id IS NOT NULL;
CREATE INDEX inbox_events_unmatched_order_idx ON inbox_events (org_id, environment, merchant_order_id)
    WHERE state = 'unmatched' AND merchant_order_id IS NOT NULL;
CREATE INDEX inbox_events_failed_idx ON inbox_events (org_id, environment) WHERE state = 'failed';
DROP TRIGGER inbox_event_orders_delete ON inbox_events;
DROP TRIGGER inbox_event_orders_update ON inbox_events;
DROP TRIGGER inbox_event_orders_insert ON inbox_events;
DROP FUNCTION inbox_event_orders_follow();
DROP TABLE inbox_event_orders;
DROP TRIGGER inbox_unresolved_update ON inbox_events;
DROP TRIGGER inbox_unresolved_insert ON inbox_events;
DROP FUNCTION inbox_unresolved_follow();
DROP TABLE inbox_unresolved;
