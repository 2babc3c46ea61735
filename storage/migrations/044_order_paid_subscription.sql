-- The subscription whose period an order's payment paid, recorded on the
-- order when it is paid. The refund of that payment, and that payment's
-- later events, are about this subscription whatever they name: a refund
-- notification may name no card binding where the payment named one, and
-- a bank's status answer names none where its notification does (the
-- notification then gives the subscription the id the bank's recurrent
-- charges will name it by).
ALTER TABLE orders ADD COLUMN paid_subscription_id uuid REFERENCES subscriptions (id);

-- Orders paid before: the subscription their events were applied to, the
-- first one (every event of an order that reached a subscription reached
-- the one its payment paid). An order whose events no longer say (an
-- event replayed since, decided already applied) is found, as before, by
-- what its events name.
UPDATE orders o SET paid_subscription_id = p.subscription_id
FROM (
    SELECT DISTINCT ON (l.order_id) l.order_id, e.applied_subscription_id AS subscription_id
    FROM inbox_event_orders l JOIN inbox_events e ON e.id = l.event_id
    WHERE e.applied_subscription_id IS NOT NULL
    ORDER BY l.order_id, e.id
) p
WHERE o.id = p.order_id AND o.paid_at IS NOT NULL;

---- create above / drop below ----

ALTER TABLE orders DROP COLUMN paid_subscription_id;
