-- Payments the service starts at a provider (StartPayment). Each attempt is
-- registered under its own provider order id before the provider is asked,
-- so that a lost answer is asked about again under the same id, and the
-- provider's notifications (which name that id) find their order.

CREATE TABLE payment_starts (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id          uuid        NOT NULL REFERENCES orders (id),
    org_id            text        NOT NULL,
    environment       text        NOT NULL,
    endpoint_id       text        NOT NULL,
    provider          text        NOT NULL,
    attempt           int         NOT NULL CHECK (attempt BETWEEN 1 AND 20),
    provider_order_id text        NOT NULL,
    state             text        NOT NULL CHECK (state IN ('starting', 'started', 'failed', 'pending_review')),
    currency          text        NOT NULL,
    minor_units       bigint      NOT NULL CHECK (minor_units >= 0),
    description       text        NOT NULL DEFAULT '',
    payment_id        text,
    payment_url       text,
    detail            text        NOT NULL DEFAULT '',
    -- A call is asking the provider until then: others wait (ABORTED).
    busy_until        timestamptz,
    -- How many calls asked the provider about it: more than one means an
    -- earlier answer was lost.
    asks              int         NOT NULL DEFAULT 1,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT payment_starts_attempt_key UNIQUE (order_id, attempt),
    -- A provider's notification names the attempt by this id: one order.
    CONSTRAINT payment_starts_provider_order_key UNIQUE (org_id, environment, provider_order_id)
);

-- The status poller's queue: one row per started payment, due for a poll
-- while its outcome is unknown (a leased queue, as the inbox).
CREATE TABLE payment_polls (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    start_id        bigint      NOT NULL UNIQUE REFERENCES payment_starts (id),
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done', 'failed')),
    attempts        int         NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    lease_owner     text,
    lease_until     timestamptz,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    processed_at    timestamptz
);
CREATE INDEX payment_polls_claim_idx ON payment_polls (next_attempt_at, id) WHERE state = 'pending';

ALTER TABLE reconciliation_items ADD COLUMN payment_start_id bigint REFERENCES payment_starts (id);
ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'failed_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment',
        'duplicate_order_id'));

---- create above / drop below ----

-- Items are evidence, never deleted: the previous schema has no kind for
-- these, so rolling back waits until there are none. The starts themselves
-- go; their payments stay in payment_attempts and the inbox.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM reconciliation_items WHERE kind = 'duplicate_order_id') THEN
        RAISE EXCEPTION 'duplicate_order_id reconciliation items exist: the previous schema cannot hold them';
    END IF;
END $$;
ALTER TABLE reconciliation_items
    DROP CONSTRAINT reconciliation_items_kind_check,
    ADD CONSTRAINT reconciliation_items_kind_check CHECK (kind IN (
        'extra_payment', 'unidentified_payment', 'amount_mismatch', 'overpayment', 'unmatched_payment',
        'uncertain_delivery', 'failed_delivery', 'paid_not_fulfilled', 'failed_event', 'refund_after_fulfillment'));
ALTER TABLE reconciliation_items DROP COLUMN payment_start_id;
DROP TABLE payment_polls;
DROP TABLE payment_starts;
