-- Three tables had a surrogate primary key, on id, that no statement finds
-- a row by: every row they got (three per paid license order, more with
-- more licenses) paid for an entry in that index, its WAL and its buffers.
--
-- - entitlements are found by order, line and unit (the unique key that
--   makes each unit granted once) and by value; id is never read.
-- - payment_attempts are found by order, provider and reference (the
--   unique key that makes each attempt recorded once) and by reference
--   alone; id only orders an order's attempts, which the key finds first.
-- - order_events are read in feed order, (xid, id), and found by order and
--   topic; never by id alone.
--
-- Each one's primary key is now the key it is read by, under the name the
-- service's statements use (ON CONFLICT ON CONSTRAINT): entitlements'
-- and attempts' unique keys, and order_events (xid, id), which replaces
-- the feed's index. The id columns stay (an identity each): the order in
-- which the rows were written.
ALTER TABLE entitlements
    DROP CONSTRAINT entitlements_pkey,
    DROP CONSTRAINT entitlements_unit_key,
    ADD CONSTRAINT entitlements_unit_key PRIMARY KEY (order_id, line_no, unit);

ALTER TABLE payment_attempts
    DROP CONSTRAINT payment_attempts_pkey,
    DROP CONSTRAINT payment_attempts_ref_key,
    ADD CONSTRAINT payment_attempts_ref_key PRIMARY KEY (order_id, provider, attempt_ref);

ALTER TABLE order_events
    DROP CONSTRAINT order_events_pkey,
    ADD CONSTRAINT order_events_pkey PRIMARY KEY (xid, id);
DROP INDEX order_events_feed_idx;

---- create above / drop below ----

CREATE INDEX order_events_feed_idx ON order_events (xid, id);
ALTER TABLE order_events
    DROP CONSTRAINT order_events_pkey,
    ADD CONSTRAINT order_events_pkey PRIMARY KEY (id);

ALTER TABLE payment_attempts
    DROP CONSTRAINT payment_attempts_ref_key,
    ADD CONSTRAINT payment_attempts_pkey PRIMARY KEY (id),
    ADD CONSTRAINT payment_attempts_ref_key UNIQUE (order_id, provider, attempt_ref);

ALTER TABLE entitlements
    DROP CONSTRAINT entitlements_unit_key,
    ADD CONSTRAINT entitlements_pkey PRIMARY KEY (id),
    ADD CONSTRAINT entitlements_unit_key UNIQUE (order_id, line_no, unit);
