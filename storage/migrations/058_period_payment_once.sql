-- One payment pays at most one period of a subscription. The rules hold
-- this under the subscription's lock (a payment announced with its bill
-- once and without it once finds the period it paid); from migration 059
-- on the database holds it too, so that no path that skips those rules — a
-- bug, a hand-written statement — can let one payment pay two periods.
--
-- A database may hold periods paid by a payment that had paid an earlier
-- period of the same subscription: stored before the rules held it. They
-- are facts about money, so they are not changed: each is marked
-- (payment_repeated), to be left out of the constraint, and gets an
-- extra_payment item for a person, who checks at the provider which period
-- the payment was for and refunds or settles the other. The item's key is
-- the one the service gives a subscription's payment (fulfillment.ItemKey):
-- a second item of that kind about that payment would not be opened anyway.
--
-- The table is read whole once, before it is altered: only the marks and
-- the items are written under the ALTER's lock, which stops its readers
-- (CheckAccess) and writers until this commits.
CREATE TEMPORARY TABLE period_payment_repeats ON COMMIT DROP AS
SELECT subscription_id, payment_id, array_agg(period ORDER BY period) AS periods
FROM subscription_periods WHERE payment_id IS NOT NULL
GROUP BY subscription_id, payment_id HAVING count(*) > 1;

ALTER TABLE subscription_periods ADD COLUMN payment_repeated boolean NOT NULL DEFAULT false;

UPDATE subscription_periods p SET payment_repeated = true
FROM period_payment_repeats r
WHERE p.subscription_id = r.subscription_id AND p.payment_id = r.payment_id AND p.period <> r.periods[1];

INSERT INTO reconciliation_items (kind, org_id, environment, provider, payment_id, subscription_id, detail, dedupe_key)
SELECT 'extra_payment', s.org_id, s.environment, s.provider, r.payment_id, r.subscription_id,
    'payment ' || r.payment_id || ' paid periods ' || array_to_string(r.periods, ', ')
        || ' of this subscription, stored before the service held a payment to one period (migration 058): '
        || 'check at the provider which period it paid, and refund or settle the others',
    'subscription|' || r.subscription_id || '|extra_payment|'
        || replace(replace(r.payment_id, '\', '\\'), '|', '\|') || '|'
FROM period_payment_repeats r JOIN subscriptions s ON s.id = r.subscription_id
ON CONFLICT (kind, dedupe_key) DO NOTHING;

---- create above / drop below ----

-- The items opened stay: they are about money a person may have acted on.
ALTER TABLE subscription_periods DROP COLUMN payment_repeated;
