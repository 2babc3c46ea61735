-- Subscriptions in the event flow: order lines that pay a period of one,
-- inbox events applied to one, their events in the feed and the outbox
-- beside order events, and the sweeper's queue that ends access.

-- A subscription line names its plan; its account_ref is the customer.
ALTER TABLE order_lines ADD COLUMN plan_id text;
ALTER TABLE order_lines
    DROP CONSTRAINT order_lines_kind_check,
    ADD CONSTRAINT order_lines_kind_check CHECK (kind IN ('license', 'balance_credit', 'external', 'subscription')),
    DROP CONSTRAINT order_lines_account_ref,
    ADD CONSTRAINT order_lines_account_ref CHECK ((kind IN ('balance_credit', 'subscription')) = (account_ref IS NOT NULL)),
    ADD CONSTRAINT order_lines_plan CHECK ((kind = 'subscription') = (plan_id IS NOT NULL));

-- The merchant's reference of the payer, when the provider relays it, and
-- the subscription an event was applied to (subscription_id is the
-- provider's own id of it, as the event named it).
ALTER TABLE inbox_events
    ADD COLUMN customer_ref text,
    ADD COLUMN applied_subscription_id uuid REFERENCES subscriptions (id);
CREATE INDEX inbox_events_subscription_idx ON inbox_events (applied_subscription_id, id)
    WHERE applied_subscription_id IS NOT NULL;

-- Subscription events join order events in one feed: an event is about an
-- order, or about a subscription and one of its periods (once per topic
-- and period).
ALTER TABLE order_events
    ALTER COLUMN order_id DROP NOT NULL,
    ADD COLUMN subscription_id uuid REFERENCES subscriptions (id),
    ADD COLUMN period int,
    ADD CONSTRAINT order_events_subject CHECK (
        (order_id IS NOT NULL AND subscription_id IS NULL AND period IS NULL)
        OR (order_id IS NULL AND subscription_id IS NOT NULL AND period IS NOT NULL)),
    ADD CONSTRAINT order_events_subscription_once UNIQUE (subscription_id, topic, period);

INSERT INTO order_events (xid, org_id, environment, subscription_id, period, topic, payload, created_at)
SELECT e.xid, s.org_id, s.environment, e.subscription_id, e.period, e.topic, e.payload, e.created_at
FROM subscription_events e JOIN subscriptions s ON s.id = e.subscription_id
ORDER BY e.id;
DROP TABLE subscription_events;

ALTER TABLE outbox_messages ADD COLUMN subscription_id uuid REFERENCES subscriptions (id);

-- The sweeper's queue: one row per subscription, due when its access ends
-- unless an event extends it (a leased queue like the inbox's).
CREATE TABLE subscription_sweeps (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id uuid        NOT NULL UNIQUE REFERENCES subscriptions (id),
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done', 'failed')),
    attempts        int         NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    lease_owner     text,
    lease_until     timestamptz,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    processed_at    timestamptz
);
CREATE INDEX subscription_sweeps_claim_idx ON subscription_sweeps (next_attempt_at, id) WHERE state = 'pending';

---- create above / drop below ----

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM order_lines WHERE kind = 'subscription') THEN
        RAISE EXCEPTION 'orders with subscription lines exist: the previous schema cannot hold them';
    END IF;
END $$;
DROP TABLE subscription_sweeps;
ALTER TABLE outbox_messages DROP COLUMN subscription_id;

CREATE TABLE subscription_events (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    xid             xid8        NOT NULL DEFAULT pg_current_xact_id(),
    subscription_id uuid        NOT NULL REFERENCES subscriptions (id),
    topic           text        NOT NULL,
    period          int         NOT NULL,
    payload         jsonb       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT subscription_events_once UNIQUE (subscription_id, topic, period)
);
INSERT INTO subscription_events (xid, subscription_id, topic, period, payload, created_at)
SELECT xid, subscription_id, topic, period, payload, created_at FROM order_events
WHERE subscription_id IS NOT NULL ORDER BY id;
DELETE FROM order_events WHERE subscription_id IS NOT NULL;
ALTER TABLE order_events
    DROP CONSTRAINT order_events_subscription_once,
    DROP CONSTRAINT order_events_subject,
    DROP COLUMN period,
    DROP COLUMN subscription_id,
    ALTER COLUMN order_id SET NOT NULL;

DROP INDEX inbox_events_subscription_idx;
ALTER TABLE inbox_events DROP COLUMN applied_subscription_id, DROP COLUMN customer_ref;

ALTER TABLE order_lines
    DROP CONSTRAINT order_lines_plan,
    DROP CONSTRAINT order_lines_account_ref,
    ADD CONSTRAINT order_lines_account_ref CHECK ((kind = 'balance_credit') = (account_ref IS NOT NULL)),
    DROP CONSTRAINT order_lines_kind_check,
    ADD CONSTRAINT order_lines_kind_check CHECK (kind IN ('license', 'balance_credit', 'external'));
ALTER TABLE order_lines DROP COLUMN plan_id;
