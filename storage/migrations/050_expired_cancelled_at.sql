-- Migration 048 kept the cancellation's time of the subscriptions that were
-- cancelled then, but not of those whose access the sweeper had already
-- ended (expired): a charge after their cancellation would start them
-- again. Their cancellation is read back from the events applied to them:
-- the one decided subscription_cancelled last, unless a purchase (an
-- order's payment applied to the subscription) was decided after it,
-- which clears a cancellation. Events deleted by retention cannot be
-- read: their subscriptions keep none. Two scans of the events, whatever
-- their number, and none when no subscription is expired without a
-- cancellation (the EXISTS is evaluated once, before them).

-- (Compiling this statement would take longer than running it.)
SET LOCAL jit = off;

WITH cancels AS (
    SELECT DISTINCT ON (applied_subscription_id) applied_subscription_id AS id,
        coalesce(occurred_at, received_at) AS at, processed_at
    FROM inbox_events
    WHERE decision = 'subscription_cancelled' AND applied_subscription_id IS NOT NULL
        AND EXISTS (SELECT 1 FROM subscriptions WHERE state = 'expired' AND cancelled_at IS NULL)
    ORDER BY applied_subscription_id, processed_at DESC, id DESC
), purchases AS (
    SELECT applied_subscription_id AS id, max(processed_at) AS processed_at
    FROM inbox_events
    WHERE applied_subscription_id IS NOT NULL AND order_id IS NOT NULL AND kind = 'payment_confirmed'
        AND EXISTS (SELECT 1 FROM subscriptions WHERE state = 'expired' AND cancelled_at IS NULL)
    GROUP BY 1
)
UPDATE subscriptions s SET cancelled_at = c.at
FROM cancels c LEFT JOIN purchases p USING (id)
WHERE s.id = c.id AND s.state = 'expired' AND s.cancelled_at IS NULL
    AND (p.processed_at IS NULL OR p.processed_at < c.processed_at);

---- create above / drop below ----

-- The times filled in are kept: they are what the rules would have kept.
SELECT 1;
