-- Late matching: a payment that arrives before its order is stored
-- 'unmatched'; creating the order queues it again, in the creating
-- transaction. These partial indexes find such events by what an order is
-- known by (its merchant order id, its checkout session) among the
-- unmatched events only: their cost follows the unmatched events, never
-- the history. An item the service resolves itself, when the order comes,
-- says so: 'matched_later'.
CREATE INDEX inbox_events_unmatched_order_idx ON inbox_events (org_id, environment, merchant_order_id)
    WHERE state = 'unmatched' AND merchant_order_id IS NOT NULL;
CREATE INDEX inbox_events_unmatched_session_idx ON inbox_events (org_id, environment, checkout_session_id)
    WHERE state = 'unmatched' AND checkout_session_id IS NOT NULL;

ALTER TABLE reconciliation_items DROP CONSTRAINT reconciliation_items_resolution_check;
ALTER TABLE reconciliation_items ADD CONSTRAINT reconciliation_items_resolution_check CHECK (resolution IN (
    'refunded', 'fulfilled_manually', 'confirmed_duplicate_delivery', 'revoked', 'retried', 'no_action',
    'matched_later'));

---- create above / drop below ----

UPDATE reconciliation_items SET resolution = 'no_action' WHERE resolution = 'matched_later';
ALTER TABLE reconciliation_items DROP CONSTRAINT reconciliation_items_resolution_check;
ALTER TABLE reconciliation_items ADD CONSTRAINT reconciliation_items_resolution_check CHECK (resolution IN (
    'refunded', 'fulfilled_manually', 'confirmed_duplicate_delivery', 'revoked', 'retried', 'no_action'));
DROP INDEX inbox_events_unmatched_order_idx, inbox_events_unmatched_session_idx;
