-- Events in a provider-neutral shape: the neutral core keeps its columns,
-- an amount's unit is a token on a network or a currency (minor units), and
-- references only one provider has (a paylink, a transaction hash, a rebill
-- id) are data: a jsonb object, never a column per provider field.

ALTER TABLE inbox_events
    ADD COLUMN refs     jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN currency text;

UPDATE inbox_events
SET refs = jsonb_strip_nulls(jsonb_build_object('paylink_id', paylink_id, 'tx_hash', tx_hash))
WHERE paylink_id IS NOT NULL OR tx_hash IS NOT NULL;

-- An amount without its unit meant nothing: earlier versions stored one for
-- events that were not confirmations. The raw body keeps it.
UPDATE inbox_events SET amount = NULL
WHERE amount IS NOT NULL AND (token IS NULL OR network IS NULL);

ALTER TABLE inbox_events
    DROP COLUMN paylink_id,
    DROP COLUMN tx_hash,
    -- A token on a network, or a currency; never part of both.
    ADD CONSTRAINT inbox_events_amount_unit CHECK (
        amount IS NULL
        OR (token IS NOT NULL AND network IS NOT NULL AND currency IS NULL)
        OR (token IS NULL AND network IS NULL AND currency IS NOT NULL)) NOT VALID;
ALTER TABLE inbox_events VALIDATE CONSTRAINT inbox_events_amount_unit;

ALTER TABLE payment_attempts
    ADD COLUMN currency text,
    DROP CONSTRAINT payment_attempts_state_check,
    ADD CONSTRAINT payment_attempts_state_check CHECK (
        state IN ('created', 'confirmed', 'expired', 'cancelled', 'refunded'));

ALTER TABLE reconciliation_items ADD COLUMN currency text;

---- create above / drop below ----

-- The previous schema knows amounts in tokens only: currency amounts lose
-- their value (events keep it in their raw body), refunded attempts read as
-- confirmed.
UPDATE reconciliation_items SET amount = NULL, expected_amount = NULL WHERE currency IS NOT NULL;
ALTER TABLE reconciliation_items DROP COLUMN currency;

UPDATE payment_attempts SET state = 'confirmed' WHERE state = 'refunded';
UPDATE payment_attempts SET amount = NULL WHERE currency IS NOT NULL;
ALTER TABLE payment_attempts
    DROP CONSTRAINT payment_attempts_state_check,
    ADD CONSTRAINT payment_attempts_state_check CHECK (state IN ('created', 'confirmed', 'expired', 'cancelled')),
    DROP COLUMN currency;

UPDATE inbox_events SET amount = NULL WHERE currency IS NOT NULL;

ALTER TABLE inbox_events
    DROP CONSTRAINT inbox_events_amount_unit,
    ADD COLUMN paylink_id text,
    ADD COLUMN tx_hash text;
UPDATE inbox_events SET paylink_id = refs ->> 'paylink_id', tx_hash = refs ->> 'tx_hash' WHERE refs <> '{}';
ALTER TABLE inbox_events DROP COLUMN refs, DROP COLUMN currency;
