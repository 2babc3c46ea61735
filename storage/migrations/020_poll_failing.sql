-- A status poll that gives up without an answer to its last question opens
-- a poll_failing reconciliation item. To tell such a poll from one whose
-- payment was merely never paid (the bank answered every time, "not yet"),
-- a poll remembers the last of its attempts the provider answered.

ALTER TABLE payment_polls
    -- The attempt the provider last answered (0: none yet): the attempts
    -- after it got no answer.
    ADD COLUMN answered_attempt int NOT NULL DEFAULT 0;

ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'failed_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment',
        'duplicate_order_id', 'poll_failing'));

---- create above / drop below ----

-- Items are evidence, never deleted: the previous schema has no kind for
-- these, so rolling back waits until there are none.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM reconciliation_items WHERE kind = 'poll_failing') THEN
        RAISE EXCEPTION 'poll_failing reconciliation items exist: the previous schema cannot hold them';
    END IF;
END $$;
ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'failed_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment',
        'duplicate_order_id'));
ALTER TABLE payment_polls DROP COLUMN answered_attempt;
