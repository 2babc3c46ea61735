-- The event that paid an order, when its payment named no payment id of
-- its own (fulfillment.PaidEventRef: "<provider>/<event id>"). The paid
-- refs cannot tell such a payment from another payment of the same
-- invoice, so a second confirmation is a payment to check; but the same
-- event processed again (a replay) is the payment that paid, already
-- applied.
ALTER TABLE orders ADD COLUMN paid_event text
    CONSTRAINT orders_paid_event_only_when_paid CHECK (paid_event IS NULL OR paid_at IS NOT NULL);

-- Orders paid before, by such a payment: the first confirmation of their
-- invoice (or of none) that named no payment id among their events, as the
-- inbox decided them in order.
UPDATE orders o SET paid_event = p.ref
FROM (
    SELECT DISTINCT ON (l.order_id) l.order_id, e.provider || '/' || e.event_id AS ref
    FROM inbox_event_orders l
    JOIN inbox_events e ON e.id = l.event_id
    JOIN orders po ON po.id = l.order_id
    WHERE po.paid_at IS NOT NULL AND po.paid_payment_id IS NULL
      AND e.kind = 'payment_confirmed' AND e.payment_id IS NULL
      AND e.invoice_id IS NOT DISTINCT FROM po.paid_invoice_id
      AND e.state = 'processed'
    ORDER BY l.order_id, e.id
) p
WHERE o.id = p.order_id;

---- create above / drop below ----

ALTER TABLE orders DROP COLUMN paid_event;
