-- An external line names the destination that fulfils it: the id of a
-- configured receiver of outbox deliveries. Other lines name none. Lines
-- stored before destinations existed have none, whatever their kind.

ALTER TABLE order_lines ADD COLUMN destination text;

ALTER TABLE order_lines ADD CONSTRAINT order_lines_destination_check
    CHECK (destination IS NULL OR (kind = 'external' AND destination ~ '^[a-z0-9][a-z0-9_-]{0,63}$'));

---- create above / drop below ----

ALTER TABLE order_lines DROP COLUMN destination;
