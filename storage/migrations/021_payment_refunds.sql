-- A partial refund is a fact of its own: one row per refund of an order,
-- whatever later becomes of the decision of the event that announced it.
-- The events of an order read these rows (under the order's lock) to tell a
-- refund announced again from a new one, and a confirmation processed after
-- a refund takes the refund's share of the credits back from them. Before
-- this table the refunds were read from inbox_events.decision, a label.

CREATE TABLE payment_refunds (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id       uuid        NOT NULL REFERENCES orders (id),
    provider       text        NOT NULL,
    -- The refunded attempt and the amount returned, as announced (NULL when
    -- the announcement does not say).
    attempt_ref    text,
    amount         numeric(38, 18),
    token          text,
    network        text,
    currency       text,
    -- The stored event that recorded it.
    inbox_event_id bigint      NOT NULL REFERENCES inbox_events (id),
    recorded_at    timestamptz NOT NULL DEFAULT now(),
    -- A refund is the same refund when it returns the same amount of the
    -- same attempt (the providers give partial refunds no id of their own).
    CONSTRAINT payment_refunds_once UNIQUE NULLS NOT DISTINCT
        (order_id, provider, attempt_ref, amount, token, network, currency)
);

-- The refunds recorded so far, in the order they were decided.
INSERT INTO payment_refunds (order_id, provider, attempt_ref, amount, token, network, currency, inbox_event_id, recorded_at)
SELECT order_id, provider, attempt_ref, amount, token, network, currency, id, coalesce(processed_at, received_at)
FROM inbox_events
WHERE decision = 'partially_refunded' AND order_id IS NOT NULL
ORDER BY processed_at, id
ON CONFLICT ON CONSTRAINT payment_refunds_once DO NOTHING;

---- create above / drop below ----

-- The previous schema reads refunds from the decisions, which still hold
-- them unless rewritten since.
DROP TABLE payment_refunds;
