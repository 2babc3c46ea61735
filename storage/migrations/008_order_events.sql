-- Order events (order.fulfilled, order.refunded, order.on_hold): written
-- once per order and event, in the transaction of the state change, and
-- read by internal services through a feed that resumes after a cursor.
-- Outbox messages announcing an event carry its payload.
--
-- The feed is ordered by (xid, id): xid is the writing transaction's id.
-- A reader takes only rows of transactions older than every transaction
-- still running (pg_snapshot_xmin), so a row it has not seen can never
-- appear before its cursor: ids are taken in one order and committed in
-- another, transaction ids below the horizon are all finished.

CREATE TABLE order_events (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    xid         xid8        NOT NULL DEFAULT pg_current_xact_id(),
    org_id      text        NOT NULL,
    environment text        NOT NULL,
    order_id    uuid        NOT NULL REFERENCES orders (id),
    topic       text        NOT NULL,
    payload     jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT order_events_once UNIQUE (order_id, topic)
);

CREATE INDEX order_events_feed_idx ON order_events (xid, id);
CREATE INDEX order_events_org_feed_idx ON order_events (org_id, xid, id);

-- The events of the orders the outbox announced before the feed existed.
INSERT INTO order_events (xid, org_id, environment, order_id, topic, payload, created_at)
SELECT DISTINCT ON (order_id, topic) '0'::xid8, org_id, environment, order_id, topic, payload, created_at
FROM outbox_messages WHERE NOT required
ORDER BY order_id, topic, id;

---- create above / drop below ----

DROP TABLE order_events;
