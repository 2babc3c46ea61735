-- One payment pays at most one period of a subscription. The rules hold
-- this under the subscription's lock (a payment announced with its bill
-- once and without it once finds the period it paid); from here on the
-- database holds it too, so that no path that skips those rules — a bug, a
-- hand-written statement — can let one payment pay two periods.
--
-- A database may hold periods paid by a payment that had paid an earlier
-- period of the same subscription: stored before the rules held it. They
-- are facts about money, so they are not changed: each is marked
-- (payment_repeated), left out of the constraint, and gets an extra_payment
-- item for a person, who checks at the provider which period the payment
-- was for and refunds or settles the other. The item's key is the one the
-- service gives a subscription's payment (fulfillment.ItemKey): a second
-- item of that kind about that payment would not be opened anyway.
ALTER TABLE subscription_periods ADD COLUMN payment_repeated boolean NOT NULL DEFAULT false;

UPDATE subscription_periods p SET payment_repeated = true
FROM (
    SELECT subscription_id, period,
        row_number() OVER (PARTITION BY subscription_id, payment_id ORDER BY period) AS nth
    FROM subscription_periods WHERE payment_id IS NOT NULL
) d
WHERE d.nth > 1 AND p.subscription_id = d.subscription_id AND p.period = d.period;

INSERT INTO reconciliation_items (kind, org_id, environment, provider, payment_id, subscription_id, detail, dedupe_key)
SELECT 'extra_payment', s.org_id, s.environment, s.provider, p.payment_id, p.subscription_id,
    'payment ' || p.payment_id || ' paid periods ' || string_agg(p.period::text, ', ' ORDER BY p.period)
        || ' of this subscription, stored before the service held a payment to one period (migration 058): '
        || 'check at the provider which period it paid, and refund or settle the others',
    'subscription|' || p.subscription_id || '|extra_payment|'
        || replace(replace(p.payment_id, '\', '\\'), '|', '\|') || '|'
FROM subscription_periods p JOIN subscriptions s ON s.id = p.subscription_id
WHERE p.payment_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM subscription_periods r
    WHERE r.subscription_id = p.subscription_id AND r.payment_id = p.payment_id AND r.payment_repeated)
GROUP BY s.org_id, s.environment, s.provider, p.payment_id, p.subscription_id
ON CONFLICT (kind, dedupe_key) DO NOTHING;

CREATE UNIQUE INDEX subscription_periods_payment_once ON subscription_periods (subscription_id, payment_id)
    WHERE payment_id IS NOT NULL AND NOT payment_repeated;

---- create above / drop below ----

-- The items opened stay: they are about money a person may have acted on.
DROP INDEX subscription_periods_payment_once;
ALTER TABLE subscription_periods DROP COLUMN payment_repeated;
