-- A message a person retried, and that was then delivered, answers the
-- failed_delivery and uncertain_delivery items its earlier rounds opened:
-- since migration 054 the delivery resolves them, as retried by the
-- service. A message retried and delivered before 054 left them open, and
-- they stay open until a person resolves them by hand, although nothing is
-- left to do. This resolves them as the delivery does today.
--
-- An open delivery item of a delivered message is always such an item: a
-- round that fails or ends uncertain leaves the message failed or
-- uncertain, and only a retry (a person's, or a re-drive's) puts it back
-- in the queue; a person who confirms a delivery resolves its items in the
-- same transaction. The open items are found by their message (the index
-- of migration 055), so this reads the open items with a message and the
-- messages they name, nothing else.
UPDATE reconciliation_items r SET state = 'resolved', resolution = 'retried',
    resolved_at = clock_timestamp(), resolved_by = 'service',
    resolution_note = 'the message was retried and delivered to ' || m.destination_id
        || coalesce(' (HTTP ' || m.last_status || ')', '')
        || '; resolved when the service was upgraded (migration 056): the delivery came before the service resolved such items itself'
FROM outbox_messages m
WHERE r.state = 'open' AND r.outbox_message_id IS NOT NULL
    AND r.kind IN ('failed_delivery', 'uncertain_delivery')
    AND m.id = r.outbox_message_id AND m.state = 'delivered';

---- create above / drop below ----

-- Nothing to undo: the items were answered, and reopening them would ask
-- people to look at deliveries that were made.

SELECT 1;
