-- Before migration 049, a refund of a subscription's payment decided before
-- the period that payment paid was recorded was lost: unmatched when it
-- named no subscription, other_payment_refunded when it named one, and the
-- period stayed paid. Such refunds whose period is still not refunded are
-- put back in the inbox queue, as a replay by the service, and decided
-- again against that period. The events are read once, and not at all
-- when no period names a payment (the EXISTS is evaluated once, first).

SET LOCAL jit = off;

WITH refunds AS MATERIALIZED (
    -- One scan of the events: the refunds that match no order and applied
    -- nothing, each then joined to the period of its payment.
    SELECT id, org_id, environment, provider, payment_id, subscription_id
    FROM inbox_events
    WHERE kind IN ('refunded', 'partially_refunded') AND payment_id IS NOT NULL AND order_id IS NULL
        AND (state = 'unmatched' OR decision = 'other_payment_refunded')
        AND EXISTS (SELECT 1 FROM subscription_periods WHERE payment_id IS NOT NULL AND refunded_at IS NULL)
), lost AS (
    SELECT DISTINCT e.id
    FROM refunds e
    JOIN subscription_periods p ON p.payment_id = e.payment_id AND p.refunded_at IS NULL
    JOIN subscriptions s ON s.id = p.subscription_id AND s.org_id = e.org_id AND s.environment = e.environment
        AND s.provider = e.provider AND (e.subscription_id IS NULL OR e.subscription_id = s.provider_subscription_id)
), replays AS (
    INSERT INTO inbox_replays (inbox_event_id, replayed_by, replayed_by_detail, previous_state,
        previous_decision, previous_reason, previous_attempts, previous_last_error)
    SELECT e.id, 'service', 'migration 052: a refund decided before the period its payment paid was recorded',
        e.state, e.decision, e.decision_reason, e.attempts, e.last_error
    FROM inbox_events e WHERE e.id IN (SELECT id FROM lost) AND e.state <> 'pending'
    RETURNING inbox_event_id AS id
), requeued AS (
    INSERT INTO inbox_work (id, next_attempt_at) SELECT id, now() FROM replays
    ON CONFLICT (id) DO UPDATE SET state = 'pending', attempts = 0, next_attempt_at = now(),
        lease_owner = NULL, lease_until = NULL, last_error = NULL, processed_at = NULL
)
UPDATE inbox_events e SET state = 'pending', attempts = 0, last_error = NULL
FROM replays r WHERE e.id = r.id;

---- create above / drop below ----

-- The refunds put back are decided once: nothing to undo.
SELECT 1;
