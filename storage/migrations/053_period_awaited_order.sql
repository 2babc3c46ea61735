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

-- Only the payment of a subscription's first period may be an order's
-- that came late: a later charge naming that order is a renewal, never the
-- order's payment (fulfillment.Step.AwaitedOrder). And the event that paid
-- it comes with the order it awaits. NOT VALID: no row has either yet (the
-- columns are new), so nothing is read under the table's lock.
ALTER TABLE subscription_periods ADD CONSTRAINT subscription_periods_awaited_first
    CHECK (awaited_merchant_order_id IS NULL OR period = 1 AND inbox_event_id IS NOT NULL) NOT VALID;

CREATE INDEX subscription_periods_awaited_order_idx ON subscription_periods (awaited_merchant_order_id)
    WHERE awaited_merchant_order_id IS NOT NULL;

---- create above / drop below ----

DROP INDEX subscription_periods_awaited_order_idx;
ALTER TABLE subscription_periods DROP CONSTRAINT subscription_periods_awaited_first;
ALTER TABLE subscription_periods DROP COLUMN awaited_merchant_order_id, DROP COLUMN inbox_event_id;
