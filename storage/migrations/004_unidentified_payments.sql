-- A payment.confirmed that names neither an invoice nor a payment (only a
-- merchant order id or a checkout session) does not identify its payment:
-- the refs of such a paying payment are NULL, never '', and whether an
-- order is paid is paid_at, not its refs. A later payment for the order that
-- cannot be told apart from the paying one (two payment ids tell, or two
-- different invoices; nothing else does) is an unidentified_payment item (one
-- per order), never an extra_payment. The paying invoice is recorded apart
-- from the paying attempt, for that comparison.

ALTER TABLE orders ADD COLUMN paid_invoice_id text;

UPDATE orders SET
    paid_attempt_ref = nullif(paid_attempt_ref, ''),
    paid_payment_id  = nullif(paid_payment_id, '')
WHERE paid_attempt_ref = '' OR paid_payment_id = '';

-- Orders paid by a confirmation with a checkout session but neither invoice
-- nor payment recorded the session as their paid attempt: it identifies no
-- payment. (inbox_events stores absent fields as NULL.)
UPDATE orders o SET paid_attempt_ref = NULL, paid_payment_id = NULL
WHERE o.paid_at IS NOT NULL
  AND (o.paid_attempt_ref IS NOT NULL OR o.paid_payment_id IS NOT NULL)
  AND EXISTS (
      SELECT 1 FROM inbox_events e
      WHERE e.order_id = o.id AND e.decision IN ('fulfilled', 'amount_mismatch')
        AND e.invoice_id IS NULL AND e.payment_id IS NULL
        AND e.attempt_ref IS NOT DISTINCT FROM o.paid_attempt_ref);

-- The invoice of the paying confirmation, where it named one.
UPDATE orders o SET paid_invoice_id = e.invoice_id
FROM inbox_events e
WHERE e.order_id = o.id AND e.decision IN ('fulfilled', 'amount_mismatch')
  AND e.invoice_id IS NOT NULL AND o.paid_attempt_ref IS NOT NULL;

ALTER TABLE orders
    ADD CONSTRAINT orders_paid_attempt_ref_not_empty CHECK (paid_attempt_ref <> ''),
    ADD CONSTRAINT orders_paid_invoice_id_not_empty CHECK (paid_invoice_id <> ''),
    ADD CONSTRAINT orders_paid_payment_id_not_empty CHECK (paid_payment_id <> ''),
    -- Refs name the payment that paid: an unpaid order has none.
    ADD CONSTRAINT orders_paid_refs_only_when_paid CHECK (
        paid_at IS NOT NULL OR (paid_attempt_ref IS NULL AND paid_invoice_id IS NULL AND paid_payment_id IS NULL));

ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment'));

---- create above / drop below ----

-- The previous schema knows no unidentified_payment: such items become the
-- extra_payment items the previous code opened for them (items are never
-- deleted). NULL paid refs read as '' there, as before.
UPDATE reconciliation_items SET kind = 'extra_payment' WHERE kind = 'unidentified_payment';

ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'paid_not_fulfilled', 'failed_event',
        'refund_after_fulfillment'));

ALTER TABLE orders
    DROP CONSTRAINT orders_paid_refs_only_when_paid,
    DROP CONSTRAINT orders_paid_payment_id_not_empty,
    DROP CONSTRAINT orders_paid_invoice_id_not_empty,
    DROP CONSTRAINT orders_paid_attempt_ref_not_empty,
    DROP COLUMN paid_invoice_id;
