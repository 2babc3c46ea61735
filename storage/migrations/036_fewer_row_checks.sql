-- Three foreign keys cost a check per row on the hot path and protect
-- nothing another constraint or the code does not:
--
-- - inbox_work (id) → inbox_events: every webhook's work row, inserted with
--   its event, checked the event and locked it (FOR KEY SHARE, a WAL
--   record of its own per webhook). The service never deletes an event; a
--   work row whose event an operator deleted is deleted by its next claim,
--   which finds no event to process.
-- - entitlements (order_id) → orders and ledger_entries (order_id) →
--   orders: each row also names its order line, (order_id, line_no) →
--   order_lines, and the line names the order. The line's key holds the
--   order too.
ALTER TABLE inbox_work DROP CONSTRAINT inbox_work_id_fkey;
ALTER TABLE entitlements DROP CONSTRAINT entitlements_order_id_fkey;
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_order_id_fkey;

---- create above / drop below ----

ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_order_id_fkey FOREIGN KEY (order_id) REFERENCES orders (id);
ALTER TABLE entitlements ADD CONSTRAINT entitlements_order_id_fkey FOREIGN KEY (order_id) REFERENCES orders (id);
DELETE FROM inbox_work w WHERE NOT EXISTS (SELECT 1 FROM inbox_events e WHERE e.id = w.id);
ALTER TABLE inbox_work ADD CONSTRAINT inbox_work_id_fkey FOREIGN KEY (id) REFERENCES inbox_events (id) ON DELETE CASCADE;
