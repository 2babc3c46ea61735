-- A sweep that used its attempts opens a sweep_failing item about its
-- subscription and is put back, never given up: the access it ends stays
-- owed. The sweeps the previous schema failed are put back too, due now:
-- the accesses they should have ended end on their next attempt, or their
-- items say why not.

ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'failed_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment',
        'duplicate_order_id', 'poll_failing', 'refund_not_applicable', 'plan_change', 'sweep_failing'));

UPDATE subscription_sweeps SET state = 'pending', attempts = 0, processed_at = NULL, next_attempt_at = now()
WHERE state = 'failed';

---- create above / drop below ----

-- Items are evidence, never deleted: the previous schema has no kind for
-- these, so rolling back waits until there are none. The sweeps put back
-- stay pending, which the previous schema reads as it always did.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM reconciliation_items WHERE kind = 'sweep_failing') THEN
        RAISE EXCEPTION 'sweep_failing reconciliation items exist: the previous schema cannot hold them';
    END IF;
END $$;
ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'failed_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment',
        'duplicate_order_id', 'poll_failing', 'refund_not_applicable', 'plan_change'));
