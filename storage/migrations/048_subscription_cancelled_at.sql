-- When a subscription was cancelled, kept when the sweeper ends its access
-- (state expired): a charge after the cancellation stays an extra payment
-- rather than starting the subscription again. Cancelled subscriptions
-- take the time of the newest event applied to them, which the rules
-- used until now.

ALTER TABLE subscriptions ADD COLUMN cancelled_at timestamptz;
UPDATE subscriptions SET cancelled_at = last_event_at WHERE state = 'cancelled';

---- create above / drop below ----

ALTER TABLE subscriptions DROP COLUMN cancelled_at;
