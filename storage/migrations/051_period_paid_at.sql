-- When each period's payment occurred, and whether it was the payment of an
-- order for the plan (a purchase) rather than a charge: a cancellation
-- announced after charges that occurred after it were applied cancels the
-- subscription and has those charges reviewed, unless the customer bought
-- the plan again after it. Periods paid before this migration have no
-- time: they count as paid before any cancellation.

ALTER TABLE subscription_periods ADD COLUMN paid_at timestamptz,
    ADD COLUMN purchase boolean NOT NULL DEFAULT false;

---- create above / drop below ----

ALTER TABLE subscription_periods DROP COLUMN paid_at, DROP COLUMN purchase;
