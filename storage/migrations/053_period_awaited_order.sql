-- A payment that names a merchant order the service does not have and a
-- subscription it has (one registered with CreateSubscription) is that
-- subscription's renewal: the order may never come (the storefront's own
-- order id), or come later (the merchant creates it after the payment).
-- The period such a payment paid keeps the merchant order id it named and
-- the event that paid it, so that the order's creation finds the payment
-- and has it decided again for the order (late matching). Only those
-- periods have them (the partial index holds no others).

ALTER TABLE subscription_periods ADD COLUMN awaited_merchant_order_id text,
    ADD COLUMN inbox_event_id bigint;

CREATE INDEX subscription_periods_awaited_order_idx ON subscription_periods (awaited_merchant_order_id)
    WHERE awaited_merchant_order_id IS NOT NULL;

---- create above / drop below ----

DROP INDEX subscription_periods_awaited_order_idx;
ALTER TABLE subscription_periods DROP COLUMN awaited_merchant_order_id, DROP COLUMN inbox_event_id;
