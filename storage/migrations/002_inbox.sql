-- The durable inbox, payment attempts, grants (entitlements and ledger
-- movements) and reconciliation items. Every "at most once" of the product
-- is a UNIQUE constraint here.

-- The attempt and payment that paid the order: a confirmation of anything
-- else is an extra payment.
ALTER TABLE orders
    ADD COLUMN paid_attempt_ref text,
    ADD COLUMN paid_payment_id  text,
    ADD COLUMN paid_at          timestamptz;

CREATE TABLE inbox_events (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider            text        NOT NULL,
    endpoint_id         text        NOT NULL,
    org_id              text        NOT NULL,
    environment         text        NOT NULL CHECK (environment IN ('live', 'test')),
    event_id            text        NOT NULL,
    event_type          text        NOT NULL,
    kind                text        NOT NULL,
    test_mode           boolean     NOT NULL,
    occurred_at         timestamptz,
    received_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Normalized payment fields.
    attempt_ref         text,
    payment_id          text,
    invoice_id          text,
    checkout_session_id text,
    merchant_order_id   text,
    paylink_id          text,
    subscription_id     text,
    amount              numeric(38, 18),
    token               text,
    network             text,
    tx_hash             text,
    -- The verified raw body, as evidence. Access-restricted; purged after the
    -- retention period.
    raw_body            bytea       NOT NULL,
    -- Processing.
    state               text        NOT NULL DEFAULT 'pending'
                                    CHECK (state IN ('pending', 'processed', 'ignored', 'unmatched', 'failed')),
    decision            text,
    decision_reason     text,
    order_id            uuid        REFERENCES orders (id),
    attempts            int         NOT NULL DEFAULT 0,
    next_attempt_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_error          text,
    lease_owner         text,
    lease_until         timestamptz,
    processed_at        timestamptz,
    -- One row per provider event, whatever the number of deliveries.
    CONSTRAINT inbox_events_event_key UNIQUE (provider, org_id, environment, event_id)
);

-- Claims scan pending events only: the index holds no processed row, so its
-- cost does not grow with history.
CREATE INDEX inbox_events_claim_idx ON inbox_events (next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX inbox_events_order_idx ON inbox_events (order_id, id) WHERE order_id IS NOT NULL;

-- Workers LISTEN on this channel; polling is the fallback.
CREATE FUNCTION inbox_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('inbox_events', '');
    RETURN NULL;
END $$;
CREATE TRIGGER inbox_events_notify AFTER INSERT ON inbox_events
    FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION inbox_events_notify();

CREATE TABLE payment_attempts (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id     uuid        NOT NULL REFERENCES orders (id),
    provider     text        NOT NULL,
    attempt_ref  text        NOT NULL,
    state        text        NOT NULL CHECK (state IN ('created', 'confirmed', 'expired', 'cancelled')),
    amount       numeric(38, 18),
    token        text,
    network      text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT payment_attempts_ref_key UNIQUE (order_id, provider, attempt_ref)
);

CREATE TABLE entitlements (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id   uuid        NOT NULL REFERENCES orders (id),
    line_no    int         NOT NULL,
    unit       int         NOT NULL CHECK (unit >= 1),
    kind       text        NOT NULL,
    value      text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- One grant per unit of an order line, ever.
    CONSTRAINT entitlements_unit_key UNIQUE (order_id, line_no, unit),
    CONSTRAINT entitlements_value_key UNIQUE (value),
    FOREIGN KEY (order_id, line_no) REFERENCES order_lines (order_id, line_no)
);

CREATE TABLE ledger_entries (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id    uuid        NOT NULL REFERENCES orders (id),
    line_no     int         NOT NULL,
    account_ref text        NOT NULL,
    movement    text        NOT NULL CHECK (movement IN ('credit', 'refund_reversal')),
    currency    text        NOT NULL,
    minor_units bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- One movement of each type per order line, ever.
    CONSTRAINT ledger_entries_movement_key UNIQUE (order_id, line_no, movement),
    FOREIGN KEY (order_id, line_no) REFERENCES order_lines (order_id, line_no)
);

CREATE TABLE reconciliation_items (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text        NOT NULL CHECK (kind IN (
                        'extra_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
                        'uncertain_delivery', 'paid_not_fulfilled', 'failed_event',
                        'refund_after_fulfillment')),
    state           text        NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'resolved')),
    org_id          text        NOT NULL,
    environment     text        NOT NULL,
    order_id        uuid        REFERENCES orders (id),
    inbox_event_id  bigint      REFERENCES inbox_events (id),
    provider        text,
    attempt_ref     text,
    payment_id      text,
    amount          numeric(38, 18),
    expected_amount numeric(38, 18),
    token           text,
    network         text,
    detail          text        NOT NULL,
    -- Names the situation, so that a redelivery never opens a second item.
    dedupe_key      text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    resolved_at     timestamptz,
    resolved_by     text,
    resolution_note text,
    CONSTRAINT reconciliation_items_dedupe_key UNIQUE (kind, dedupe_key)
);

CREATE INDEX reconciliation_items_open_idx ON reconciliation_items (kind, id) WHERE state = 'open';
CREATE INDEX reconciliation_items_order_idx ON reconciliation_items (order_id) WHERE order_id IS NOT NULL;

---- create above / drop below ----

DROP TABLE reconciliation_items;
DROP TABLE ledger_entries;
DROP TABLE entitlements;
DROP TABLE payment_attempts;
DROP TRIGGER inbox_events_notify ON inbox_events;
DROP FUNCTION inbox_events_notify();
DROP TABLE inbox_events;
ALTER TABLE orders DROP COLUMN paid_attempt_ref, DROP COLUMN paid_payment_id, DROP COLUMN paid_at;
