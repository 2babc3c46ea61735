-- A payment of an order whose subscription line is for another plan than
-- the subscription the payment names is refused (plan_change_refused): the
-- order is on hold, no period is paid, and a plan_change item hands the
-- change to a person.

ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'failed_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment',
        'duplicate_order_id', 'poll_failing', 'refund_not_applicable', 'plan_change'));

---- create above / drop below ----

-- Items are evidence, never deleted: the previous schema has no kind for
-- these, so rolling back waits until there are none.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM reconciliation_items WHERE kind = 'plan_change') THEN
        RAISE EXCEPTION 'plan_change reconciliation items exist: the previous schema cannot hold them';
    END IF;
END $$;
ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'failed_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment',
        'duplicate_order_id', 'poll_failing', 'refund_not_applicable'));
