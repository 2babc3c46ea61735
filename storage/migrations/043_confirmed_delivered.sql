-- A person who confirmed with a destination that it has a failed or
-- uncertain message marks it delivered (ConfirmOutboxDelivery); the
-- message's item is resolved with that, as 'confirmed_delivered'.
ALTER TABLE reconciliation_items DROP CONSTRAINT reconciliation_items_resolution_check;
ALTER TABLE reconciliation_items ADD CONSTRAINT reconciliation_items_resolution_check CHECK (resolution IN (
    'refunded', 'fulfilled_manually', 'confirmed_duplicate_delivery', 'revoked', 'retried', 'no_action',
    'matched_later', 'confirmed_delivered'));

---- create above / drop below ----

UPDATE reconciliation_items SET resolution = 'no_action' WHERE resolution = 'confirmed_delivered';
ALTER TABLE reconciliation_items DROP CONSTRAINT reconciliation_items_resolution_check;
ALTER TABLE reconciliation_items ADD CONSTRAINT reconciliation_items_resolution_check CHECK (resolution IN (
    'refunded', 'fulfilled_manually', 'confirmed_duplicate_delivery', 'revoked', 'retried', 'no_action',
    'matched_later'));
