-- A status poll remembers whether the provider's last answer said the
-- payer's money is held: authorized on the card, neither taken nor
-- released (T-Bank AUTHORIZED on a two-stage terminal). Such a payment is
-- not "never paid": when the poll uses its attempts with the money still
-- held, nothing in the service will take or release it, so the poll opens
-- a poll_failing item as it does when the provider stops answering.
--
-- The provider's status word, NULL when the last answer did not say the
-- money is held. Polls answered before this migration read as not held.
ALTER TABLE payment_polls ADD COLUMN answered_held text;

---- create above / drop below ----

ALTER TABLE payment_polls DROP COLUMN answered_held;
