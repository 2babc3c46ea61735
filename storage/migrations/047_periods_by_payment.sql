-- A refund of a subscription's payment that names no subscription (a
-- T-Bank refund of a recurrent charge names no card binding) is applied to
-- the subscription whose period that payment paid: periods are found by
-- their payment.

CREATE INDEX subscription_periods_payment_idx ON subscription_periods (payment_id) WHERE payment_id IS NOT NULL;

---- create above / drop below ----

DROP INDEX subscription_periods_payment_idx;
