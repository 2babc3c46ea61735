-- The rows a decision writes about an order no longer check their order
-- (or its line) with a foreign key. Every one of these checks ran once per
-- row on the processing path, as a query of its own inside PostgreSQL (an
-- index lookup and a row lock on the parent), and protected nothing the
-- way the rows are written does not:
--
-- - each row is written by the effect writer in the transaction that
--   locked its order (SELECT … FOR UPDATE) and read it: the order exists;
-- - licenses and balance credits are inserted from the order's lines
--   themselves (INSERT … SELECT … FROM order_lines): the line exists;
-- - the service deletes no order and no order line, and no operator path
--   does either.
--
-- The same holds for a delivery attempt and its message: the attempt is
-- recorded by the dispatcher that holds the message's work row, in the
-- transaction that read the message with it, and no message is deleted.
--
-- Each of the lines' and the message's checks also locked its parent
-- (FOR KEY SHARE): a WAL record of its own per line granted and per
-- delivery attempt. The checks that remain are those of rows whose parent
-- is named by input (an event's subscription, a refund's stored event, a
-- message's destination), and that of a message's work row (an orphaned
-- work row would be claimed until its attempts ran out).
ALTER TABLE outbox_attempts DROP CONSTRAINT outbox_attempts_message_id_fkey;
ALTER TABLE entitlements DROP CONSTRAINT entitlements_order_id_line_no_fkey;
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_order_id_line_no_fkey;
ALTER TABLE payment_attempts DROP CONSTRAINT payment_attempts_order_id_fkey;
ALTER TABLE order_events DROP CONSTRAINT order_events_order_id_fkey;
ALTER TABLE inbox_events DROP CONSTRAINT inbox_events_order_id_fkey;

---- create above / drop below ----

ALTER TABLE inbox_events ADD CONSTRAINT inbox_events_order_id_fkey FOREIGN KEY (order_id) REFERENCES orders (id);
ALTER TABLE order_events ADD CONSTRAINT order_events_order_id_fkey FOREIGN KEY (order_id) REFERENCES orders (id);
ALTER TABLE payment_attempts ADD CONSTRAINT payment_attempts_order_id_fkey FOREIGN KEY (order_id) REFERENCES orders (id);
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_order_id_line_no_fkey
    FOREIGN KEY (order_id, line_no) REFERENCES order_lines (order_id, line_no);
ALTER TABLE entitlements ADD CONSTRAINT entitlements_order_id_line_no_fkey
    FOREIGN KEY (order_id, line_no) REFERENCES order_lines (order_id, line_no);
ALTER TABLE outbox_attempts ADD CONSTRAINT outbox_attempts_message_id_fkey
    FOREIGN KEY (message_id) REFERENCES outbox_messages (id);
