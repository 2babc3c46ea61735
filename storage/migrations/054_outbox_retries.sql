-- How many times a person (or a re-drive) put a message back in the queue
-- after its delivery ended failed, uncertain or delivered: each is a new
-- round of attempts, and a round that fails, or ends uncertain, opens an
-- item of its own (fulfillment.ItemSubject.Round). A retry that only
-- hurries a pending message is not counted. The default is a constant:
-- adding the column rewrites nothing.

ALTER TABLE outbox_messages ADD COLUMN retries integer NOT NULL DEFAULT 0;

---- create above / drop below ----

ALTER TABLE outbox_messages DROP COLUMN retries;
