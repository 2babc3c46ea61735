-- The transactional outbox: a message is written in the transaction of the
-- state change that causes it, and delivered afterwards by HTTP to a
-- configured destination. A message's idempotency key is the same across
-- retries, restarts, replays and replicas (it is sent as webhook-id and
-- Idempotency-Key), and a destination holds one message per key.
--
-- Messages are a leased queue: 'pending' while queued (attempts,
-- next_attempt_at and the lease columns as for inbox events), then
-- 'delivered'; 'failed' past the destination's attempts; 'uncertain' when a
-- destination that does not honour the key may or may not have received it.
-- sending_since is set, for such destinations, while a request may be on the
-- wire: a message found that way after a crash is not sent again.

CREATE TABLE outbox_messages (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination_id  text        NOT NULL,
    topic           text        NOT NULL,
    idempotency_key text        NOT NULL CHECK (idempotency_key ~ '^[!-~]+$' AND length(idempotency_key) <= 256),
    org_id          text        NOT NULL,
    environment     text        NOT NULL,
    order_id        uuid        REFERENCES orders (id),
    line_no         int,
    -- The order is fulfilled only once its required messages are delivered.
    required        boolean     NOT NULL,
    payload         jsonb       NOT NULL,
    state           text        NOT NULL DEFAULT 'pending'
                                CHECK (state IN ('pending', 'delivered', 'failed', 'uncertain')),
    attempts        int         NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_owner     text,
    lease_until     timestamptz,
    sending_since   timestamptz,
    last_status     int,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    processed_at    timestamptz,
    CONSTRAINT outbox_messages_key UNIQUE (destination_id, idempotency_key),
    CONSTRAINT outbox_messages_line CHECK (line_no IS NULL OR order_id IS NOT NULL)
);

-- Each destination's dispatcher claims its own due messages; reclaiming
-- scans every destination's.
CREATE INDEX outbox_messages_due_idx ON outbox_messages (destination_id, next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX outbox_messages_pending_idx ON outbox_messages (next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX outbox_messages_order_idx ON outbox_messages (order_id) WHERE order_id IS NOT NULL;
CREATE INDEX outbox_messages_list_idx ON outbox_messages (state, id);

-- Every attempt at a message: when, what came back, and what it meant.
CREATE TABLE outbox_attempts (
    message_id  bigint      NOT NULL REFERENCES outbox_messages (id),
    attempt     int         NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    status      int,
    outcome     text        NOT NULL CHECK (outcome IN ('delivered', 'retry', 'uncertain', 'gone', 'interrupted')),
    reason      text        NOT NULL,
    PRIMARY KEY (message_id, attempt, finished_at)
);

-- A destination an admin (or a 410 Gone) disabled: its messages wait.
CREATE TABLE outbox_destinations (
    id              text        PRIMARY KEY,
    disabled_at     timestamptz,
    disabled_reason text,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE reconciliation_items ADD COLUMN outbox_message_id bigint REFERENCES outbox_messages (id);
ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'failed_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment'));

---- create above / drop below ----

-- The previous schema has no outbox: its items lose their message and
-- failed deliveries read as uncertain ones (items are never deleted).
UPDATE reconciliation_items SET kind = 'uncertain_delivery' WHERE kind = 'failed_delivery';
ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment'));
ALTER TABLE reconciliation_items DROP COLUMN outbox_message_id;
DROP TABLE outbox_destinations;
DROP TABLE outbox_attempts;
DROP TABLE outbox_messages;
