-- An order event is unique per (order, topic), a subscription event per
-- (subscription, topic, period). Each of the two unique constraints held
-- every row of the table, the other kind's too, whose NULL never
-- conflicts: an index entry per event that no lookup reads, written with
-- every event. Each uniqueness now holds its own kind's rows; the lookups
-- by order or by subscription use them as before.

CREATE UNIQUE INDEX order_events_order_once ON order_events (order_id, topic)
    WHERE order_id IS NOT NULL;
CREATE UNIQUE INDEX order_events_subscription_period_once ON order_events (subscription_id, topic, period)
    WHERE subscription_id IS NOT NULL;
ALTER TABLE order_events
    DROP CONSTRAINT order_events_once,
    DROP CONSTRAINT order_events_subscription_once;

---- create above / drop below ----

ALTER TABLE order_events
    ADD CONSTRAINT order_events_once UNIQUE (order_id, topic),
    ADD CONSTRAINT order_events_subscription_once UNIQUE (subscription_id, topic, period);
DROP INDEX order_events_order_once, order_events_subscription_period_once;
