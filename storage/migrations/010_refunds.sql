-- Refunds: a refunded order's licenses are revoked, never deleted (when
-- and why stay visible); a partial refund takes back its share of each
-- balance credit, once per refund.

ALTER TABLE entitlements
    ADD COLUMN revoked_at     timestamptz,
    ADD COLUMN revoked_reason text;

ALTER TABLE ledger_entries ADD COLUMN refund_ref text;
ALTER TABLE ledger_entries
    DROP CONSTRAINT ledger_entries_movement_check,
    ADD CONSTRAINT ledger_entries_movement_check CHECK (movement IN ('credit', 'refund_reversal', 'partial_reversal')),
    -- A partial reversal names its refund; the others none.
    ADD CONSTRAINT ledger_entries_refund_ref_check CHECK ((movement = 'partial_reversal') = (refund_ref IS NOT NULL)),
    DROP CONSTRAINT ledger_entries_movement_key,
    -- One credit and one full reversal per order line, ever; one partial
    -- reversal per line and refund.
    ADD CONSTRAINT ledger_entries_movement_key UNIQUE NULLS NOT DISTINCT (order_id, line_no, movement, refund_ref);

---- create above / drop below ----

-- Movements are evidence, never deleted: the previous schema has no place
-- for partial reversals, so rolling back waits until there are none.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM ledger_entries WHERE movement = 'partial_reversal') THEN
        RAISE EXCEPTION 'partial_reversal ledger entries exist: the previous schema cannot hold them';
    END IF;
END $$;
ALTER TABLE ledger_entries
    DROP CONSTRAINT ledger_entries_movement_key,
    DROP CONSTRAINT ledger_entries_refund_ref_check,
    DROP CONSTRAINT ledger_entries_movement_check,
    ADD CONSTRAINT ledger_entries_movement_check CHECK (movement IN ('credit', 'refund_reversal')),
    ADD CONSTRAINT ledger_entries_movement_key UNIQUE (order_id, line_no, movement);
ALTER TABLE ledger_entries DROP COLUMN refund_ref;
ALTER TABLE entitlements DROP COLUMN revoked_reason, DROP COLUMN revoked_at;
