-- A refund can be announced before the payment it takes back: the bank's
-- refund of a recurrent charge may come before the charge's notification.
-- Such a refund finds no period paid by its payment and is decided
-- unmatched; when a period paid by that payment is recorded, it is queued
-- again. Late matching finds the unmatched refunds by their payment.
--
-- The unmatched refunds that name a payment wait for it, not for the
-- subscription they name: the subscription's creation alone no longer
-- queues them again (the service's late matching, not this schema).

ALTER TABLE inbox_unresolved ADD COLUMN payment_id text;

UPDATE inbox_unresolved u SET payment_id = e.payment_id
FROM inbox_events e
WHERE e.id = u.event_id AND e.kind IN ('refunded', 'partially_refunded') AND e.payment_id IS NOT NULL;

CREATE INDEX inbox_unresolved_payment_idx ON inbox_unresolved (org_id, environment, provider, payment_id)
    WHERE state = 'unmatched' AND payment_id IS NOT NULL;

CREATE OR REPLACE FUNCTION inbox_unresolved_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('failed', 'unmatched') THEN
        INSERT INTO inbox_unresolved (event_id, org_id, environment, provider, state, received_at,
            merchant_order_id, checkout_session_id, subscription_id, payment_id)
        VALUES (NEW.id, NEW.org_id, NEW.environment, NEW.provider, NEW.state, NEW.received_at,
            NEW.merchant_order_id, NEW.checkout_session_id, NEW.subscription_id,
            CASE WHEN NEW.kind IN ('refunded', 'partially_refunded') THEN NEW.payment_id END)
        ON CONFLICT (event_id) DO UPDATE SET org_id = EXCLUDED.org_id, environment = EXCLUDED.environment,
            provider = EXCLUDED.provider, state = EXCLUDED.state, received_at = EXCLUDED.received_at,
            merchant_order_id = EXCLUDED.merchant_order_id, checkout_session_id = EXCLUDED.checkout_session_id,
            subscription_id = EXCLUDED.subscription_id, payment_id = EXCLUDED.payment_id;
    ELSE
        DELETE FROM inbox_unresolved WHERE event_id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;

---- create above / drop below ----

CREATE OR REPLACE FUNCTION inbox_unresolved_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('failed', 'unmatched') THEN
        INSERT INTO inbox_unresolved (event_id, org_id, environment, provider, state, received_at,
            merchant_order_id, checkout_session_id, subscription_id)
        VALUES (NEW.id, NEW.org_id, NEW.environment, NEW.provider, NEW.state, NEW.received_at,
            NEW.merchant_order_id, NEW.checkout_session_id, NEW.subscription_id)
        ON CONFLICT (event_id) DO UPDATE SET org_id = EXCLUDED.org_id, environment = EXCLUDED.environment,
            provider = EXCLUDED.provider, state = EXCLUDED.state, received_at = EXCLUDED.received_at,
            merchant_order_id = EXCLUDED.merchant_order_id, checkout_session_id = EXCLUDED.checkout_session_id,
            subscription_id = EXCLUDED.subscription_id;
    ELSE
        DELETE FROM inbox_unresolved WHERE event_id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;

DROP INDEX inbox_unresolved_payment_idx;
ALTER TABLE inbox_unresolved DROP COLUMN payment_id;
