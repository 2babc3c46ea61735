-- Subscriptions: one row per subscription at a provider, its paid periods
-- (unique per subscription and number, and per bill), and the events its
-- changes announce (once per subscription, topic and period).

CREATE TABLE subscriptions (
    id                       uuid        PRIMARY KEY,
    org_id                   text        NOT NULL,
    environment              text        NOT NULL,
    provider                 text        NOT NULL,
    provider_subscription_id text        NOT NULL,
    customer_ref             text        NOT NULL,
    plan_id                  text        NOT NULL,
    state                    text        NOT NULL DEFAULT 'active'
        CHECK (state IN ('active', 'past_due', 'cancelled', 'expired')),
    periods                  int         NOT NULL DEFAULT 0 CHECK (periods >= 0),
    period_start             timestamptz,
    period_end               timestamptz,
    last_event_at            timestamptz,
    access_ended_at          timestamptz,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT subscriptions_provider_key UNIQUE (org_id, environment, provider, provider_subscription_id)
);
-- CheckAccess reads by customer and plan.
CREATE INDEX subscriptions_customer_idx ON subscriptions (org_id, environment, customer_ref, plan_id);

-- A paid period is an entitlement: one per (subscription, number), and one
-- per bill (an invoice, or a payment that is its own bill).
CREATE TABLE subscription_periods (
    subscription_id uuid        NOT NULL REFERENCES subscriptions (id),
    period          int         NOT NULL CHECK (period >= 1),
    period_key      text        NOT NULL,
    payment_id      text,
    starts_at       timestamptz NOT NULL,
    ends_at         timestamptz NOT NULL CHECK (ends_at > starts_at),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subscription_id, period),
    CONSTRAINT subscription_periods_bill_key UNIQUE (subscription_id, period_key)
);

-- What a subscription's changes announce (subscription.renewed,
-- subscription.past_due, subscription.access_ended): once per
-- subscription, topic and period. Delivering them through the outbox and
-- the event feed comes later.
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

ALTER TABLE reconciliation_items ADD COLUMN subscription_id uuid REFERENCES subscriptions (id);

---- create above / drop below ----

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM reconciliation_items WHERE subscription_id IS NOT NULL) THEN
        RAISE EXCEPTION 'reconciliation items about subscriptions exist: the previous schema cannot hold them';
    END IF;
END $$;
ALTER TABLE reconciliation_items DROP COLUMN subscription_id;
DROP TABLE subscription_events;
DROP TABLE subscription_periods;
DROP TABLE subscriptions;
