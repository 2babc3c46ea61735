-- An order event's body (order.fulfilled, order.refunded, order.on_hold)
-- holds nothing the feed does not have without it: the order's id, org,
-- environment, merchant order id and total never change, the state is the
-- one its topic announces, and its timestamp is the event's created_at,
-- which the writer now sets to the time it rendered the body at. Stored,
-- it was about 320 bytes of every paid order's event row and of its WAL.
-- The writer now stores the body of such an event as NULL and the feed
-- renders it from the order; the body still goes, rendered, into the
-- outbox messages that announce the event. A subscription event keeps its
-- body: it carries the subscription as the decision left it, which later
-- decisions change. Events stored before keep theirs.
ALTER TABLE order_events ALTER COLUMN payload DROP NOT NULL;
-- NOT VALID: every row stored before has its body (the column was NOT
-- NULL), and validating would scan the table under this statement's lock,
-- holding up every decision that publishes an event meanwhile. New rows are
-- checked all the same.
ALTER TABLE order_events ADD CONSTRAINT order_events_payload_rendered
    CHECK (payload IS NOT NULL OR order_id IS NOT NULL) NOT VALID;

---- create above / drop below ----

-- The bodies the feed rendered, stored as the writer rendered them.
UPDATE order_events e SET payload = jsonb_build_object(
        'type', e.topic,
        'timestamp', to_char(e.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'data', jsonb_build_object(
            'order_id', o.id, 'org_id', o.org_id, 'environment', o.environment,
            'merchant_order_id', o.merchant_order_id, 'state', substr(e.topic, length('order.') + 1),
            'total', jsonb_build_object('currency', o.total_currency, 'minor_units', o.total_minor_units::text)))
FROM orders o
WHERE e.payload IS NULL AND o.id = e.order_id;
ALTER TABLE order_events DROP CONSTRAINT order_events_payload_rendered;
ALTER TABLE order_events ALTER COLUMN payload SET NOT NULL;
