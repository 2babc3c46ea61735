-- Refunds name their payment by its id, whatever attempt they name. A
-- provider may announce one payment under its invoice once and under its own
-- id alone another time, and each names another attempt (the invoice, or
-- the payment's id); the order rules now find a payment's refunds by either.
--
-- payment_attempts.refunded_payment_ids: the payments of an attempt that is
-- an invoice refunded in full, by their ids. A refund before the
-- confirmation that names the invoice records the invoice's attempt refunded
-- and its payment here; a confirmation naming the payment alone then grants
-- nothing for money that went back, and a refund of a second payment of the
-- invoice is recorded, not taken for the first announced again. A refund of
-- another payment of the invoice that paid the order is recorded here too,
-- the attempt staying confirmed. NULL: none, and every attempt refunded
-- before this migration (a refund of theirs decided again, by a replay,
-- records its payment).
--
-- payment_refunds.payment_id: the payment a partial refund named (NULL: none,
-- and every refund recorded before this migration, found by its attempt as
-- before). A confirmation processed after a partial refund takes the
-- refund's share back however either named the payment; the same refund
-- announced under both names is one.
ALTER TABLE payment_attempts ADD COLUMN refunded_payment_ids text[];

ALTER TABLE payment_refunds ADD COLUMN payment_id text;

---- create above / drop below ----

ALTER TABLE payment_refunds DROP COLUMN payment_id;
ALTER TABLE payment_attempts DROP COLUMN refunded_payment_ids;
