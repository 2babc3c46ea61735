-- The payments refunded in full under an attempt that is an invoice (its
-- attempt_ref is not a payment's id), by their ids. A provider may announce
-- one payment under its invoice once and under its own id alone another time:
-- a refund before the confirmation that names the invoice records the
-- invoice's attempt refunded, and the confirmation that names the payment
-- alone is of another attempt. The order rules find the refunded payment
-- here and grant nothing for money that went back; and a refund of a second
-- payment of a refunded invoice is recorded, not taken for the first one
-- announced again. NULL: none (every attempt refunded before this migration,
-- whose redelivered refund then records its payment).
ALTER TABLE payment_attempts
    ADD COLUMN refunded_payment_ids text[],
    -- NOT VALID: no row has any yet, and validating would read the whole
    -- table under this statement's exclusive lock. New rows and updates are
    -- checked all the same.
    ADD CONSTRAINT payment_attempts_refunded_payments_only_when_refunded
        CHECK (refunded_payment_ids IS NULL OR state = 'refunded') NOT VALID;

---- create above / drop below ----

ALTER TABLE payment_attempts DROP COLUMN refunded_payment_ids;
