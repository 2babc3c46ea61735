-- A refund that cannot apply to the payment it names (a partial refund of
-- a payment refunded in full already, or one larger than what is left of
-- the order's total) is decided refund_not_applicable and opens an item of
-- its own kind: nothing was recorded or taken back, and a person looks at
-- the money at the provider.

ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'failed_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment',
        'duplicate_order_id', 'poll_failing', 'refund_not_applicable'));

---- create above / drop below ----

-- Items are evidence, never deleted: the previous schema has no kind for
-- these, so rolling back waits until there are none.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM reconciliation_items WHERE kind = 'refund_not_applicable') THEN
        RAISE EXCEPTION 'refund_not_applicable reconciliation items exist: the previous schema cannot hold them';
    END IF;
END $$;
ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'failed_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment',
        'duplicate_order_id', 'poll_failing'));
