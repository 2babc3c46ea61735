-- A full refund of the payment that paid a subscription period is recorded
-- on the period, once: the rules read it so that the refund announced again
-- or replayed cuts nothing twice, and the subscription's reads say its
-- access ended because its latest period was refunded.

ALTER TABLE subscription_periods ADD COLUMN refunded_at timestamptz;

---- create above / drop below ----

-- The refund is evidence the previous schema cannot hold: rolling back
-- waits until no period is refunded.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM subscription_periods WHERE refunded_at IS NOT NULL) THEN
        RAISE EXCEPTION 'refunded subscription periods exist: the previous schema cannot hold them';
    END IF;
END $$;
ALTER TABLE subscription_periods DROP COLUMN refunded_at;
