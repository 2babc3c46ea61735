-- Time-range reads of the console and GetActivity: the last hour's events
-- stored, orders fulfilled and messages delivered per minute, and stored
-- events by when they were received. Rows of these tables are appended in
-- time order, so a BRIN index (one summary per range of pages) finds a
-- time range at a fraction of a B-tree's size and at almost no cost to
-- the inserts on the ingest path.

CREATE INDEX inbox_events_received_brin ON inbox_events USING brin (received_at) WITH (pages_per_range = 32);
CREATE INDEX order_events_created_brin ON order_events USING brin (created_at) WITH (pages_per_range = 32);
CREATE INDEX outbox_attempts_finished_brin ON outbox_attempts USING brin (finished_at) WITH (pages_per_range = 32);

---- create above / drop below ----

DROP INDEX outbox_attempts_finished_brin;
DROP INDEX order_events_created_brin;
DROP INDEX inbox_events_received_brin;
