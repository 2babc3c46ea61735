-- Orders and their lines: the server-approved content of what a customer
-- must receive. Money is never a float: fiat in bigint minor units, token
-- amounts in numeric.

CREATE TABLE orders (
    id                   uuid        PRIMARY KEY,
    org_id               text        NOT NULL,
    environment          text        NOT NULL CHECK (environment IN ('live', 'test')),
    merchant_order_id    text        NOT NULL,
    checkout_session_id  text,
    state                text        NOT NULL CHECK (state IN (
                             'pending_payment', 'paid', 'fulfilling', 'fulfilled',
                             'on_hold', 'cancelled', 'expired', 'refunded')),
    total_currency       text        NOT NULL CHECK (total_currency ~ '^[A-Z]{3}$'),
    total_minor_units    bigint      NOT NULL CHECK (total_minor_units > 0),
    settlement_token     text,
    settlement_network   text,
    settlement_amount    numeric(38, 18) CHECK (settlement_amount > 0),
    settlement_tolerance numeric(38, 18) CHECK (settlement_tolerance >= 0),
    -- Hash of the content as first submitted: tells an idempotent repeat of
    -- CreateOrder from a conflicting reuse of the merchant order id.
    fingerprint          text        NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT orders_merchant_order_key UNIQUE (org_id, environment, merchant_order_id),
    CONSTRAINT orders_settlement_complete CHECK (
        (settlement_token IS NULL) = (settlement_network IS NULL) AND
        (settlement_token IS NULL) = (settlement_amount IS NULL) AND
        (settlement_token IS NULL) = (settlement_tolerance IS NULL))
);

-- A checkout session pays exactly one order.
CREATE UNIQUE INDEX orders_checkout_session_key
    ON orders (org_id, environment, checkout_session_id)
    WHERE checkout_session_id IS NOT NULL;

-- Listing one org's orders newest first (ids are UUIDv7: time ordered).
CREATE INDEX orders_org_id_idx ON orders (org_id, id DESC);

CREATE TABLE order_lines (
    order_id          uuid   NOT NULL REFERENCES orders (id),
    line_no           int    NOT NULL CHECK (line_no >= 0),
    sku               text   NOT NULL,
    kind              text   NOT NULL CHECK (kind IN ('license', 'balance_credit', 'external')),
    quantity          bigint NOT NULL CHECK (quantity > 0),
    currency          text   NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    unit_minor_units  bigint NOT NULL CHECK (unit_minor_units > 0),
    account_ref       text,
    PRIMARY KEY (order_id, line_no),
    CONSTRAINT order_lines_account_ref CHECK ((kind = 'balance_credit') = (account_ref IS NOT NULL))
);

---- create above / drop below ----

DROP TABLE order_lines;
DROP TABLE orders;
