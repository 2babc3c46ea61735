-- What the payment that paid an order paid, as its confirmation announced
-- it (the amount and its unit: a token on a network, or a currency in minor
-- units). A payment larger than the order's total has its excess refunded
-- first: its partial refunds take back a share of the credits only for
-- what they return of the order's price, and what is left to refund of it
-- is what it paid. payment_attempts.amount is the amount last announced of
-- an attempt, which a later event of it replaces. Orders paid before keep
-- none (NULL): their partial refunds are shares of the total, as they were.
ALTER TABLE orders
    ADD COLUMN paid_amount   numeric(38, 18),
    ADD COLUMN paid_token    text,
    ADD COLUMN paid_network  text,
    ADD COLUMN paid_currency text,
    -- NOT VALID: no row has an amount yet, and validating would read the
    -- whole table under this statement's exclusive lock. New rows and
    -- updates are checked all the same.
    ADD CONSTRAINT orders_paid_amount_only_when_paid CHECK (paid_amount IS NULL OR paid_at IS NOT NULL) NOT VALID;

---- create above / drop below ----

ALTER TABLE orders
    DROP COLUMN paid_amount,
    DROP COLUMN paid_token,
    DROP COLUMN paid_network,
    DROP COLUMN paid_currency;
