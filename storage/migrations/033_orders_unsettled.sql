-- The update of an order when it is paid (its state, its payment's
-- references) can be a HOT update — a new version on the same page, no
-- new index entries — when no index covers a column it changes and the
-- page has room. Two partial indexes covered the state and the payment
-- time: the orders paid and not settled yet, which the fulfillment SLA
-- check and the reconciliation summary read. Every order's update at
-- payment added an entry to each of the order's six indexes.
--
-- Those orders are now rows of their own, which a trigger keeps with
-- every change of an order, whoever makes it: a paid order whose
-- fulfillment waits (an external line, or on hold) has its row until it
-- is fulfilled, refunded or cancelled. An order fulfilled at once — a
-- license, a balance credit — never has one, and its update does not call
-- the trigger's function (the triggers' WHEN conditions).
CREATE TABLE orders_unsettled (
    order_id    uuid        PRIMARY KEY REFERENCES orders (id) ON DELETE CASCADE,
    org_id      text        NOT NULL,
    environment text        NOT NULL,
    state       text        NOT NULL CHECK (state IN ('paid', 'fulfilling', 'on_hold')),
    paid_at     timestamptz NOT NULL
);

-- The SLA check reads the orders still waiting for their fulfillment,
-- oldest payment first (the on-hold ones wait for a person, not for the
-- fulfillment).
CREATE INDEX orders_unsettled_awaiting_idx ON orders_unsettled (paid_at, order_id)
    WHERE state IN ('paid', 'fulfilling');

CREATE FUNCTION orders_unsettled_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.paid_at IS NOT NULL AND NEW.state IN ('paid', 'fulfilling', 'on_hold') THEN
        INSERT INTO orders_unsettled (order_id, org_id, environment, state, paid_at)
        VALUES (NEW.id, NEW.org_id, NEW.environment, NEW.state, NEW.paid_at)
        ON CONFLICT (order_id) DO UPDATE SET org_id = EXCLUDED.org_id, environment = EXCLUDED.environment,
            state = EXCLUDED.state, paid_at = EXCLUDED.paid_at;
    ELSE
        DELETE FROM orders_unsettled WHERE order_id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER orders_unsettled_insert AFTER INSERT ON orders FOR EACH ROW
    WHEN (NEW.paid_at IS NOT NULL AND NEW.state IN ('paid', 'fulfilling', 'on_hold'))
    EXECUTE FUNCTION orders_unsettled_follow();
CREATE TRIGGER orders_unsettled_update AFTER UPDATE ON orders FOR EACH ROW
    WHEN ((OLD.paid_at IS NOT NULL AND OLD.state IN ('paid', 'fulfilling', 'on_hold'))
        OR (NEW.paid_at IS NOT NULL AND NEW.state IN ('paid', 'fulfilling', 'on_hold')))
    EXECUTE FUNCTION orders_unsettled_follow();

INSERT INTO orders_unsettled (order_id, org_id, environment, state, paid_at)
SELECT id, org_id, environment, state, paid_at FROM orders
WHERE paid_at IS NOT NULL AND state IN ('paid', 'fulfilling', 'on_hold');

DROP INDEX orders_awaiting_fulfillment_idx;
DROP INDEX orders_paid_unfulfilled_idx;

-- Room on each page for the new versions of its orders' updates. The
-- setting applies to the pages written from now on; VACUUM prunes the old
-- versions as it passes (and an update that finds its page full prunes it
-- first).
ALTER TABLE orders SET (fillfactor = 80);

---- create above / drop below ----

ALTER TABLE orders RESET (fillfactor);
CREATE INDEX orders_paid_unfulfilled_idx ON orders (org_id, environment)
    WHERE paid_at IS NOT NULL AND state IN ('paid', 'fulfilling', 'on_hold');
CREATE INDEX orders_awaiting_fulfillment_idx ON orders (paid_at, id)
    WHERE paid_at IS NOT NULL AND state IN ('paid', 'fulfilling');
DROP TRIGGER orders_unsettled_update ON orders;
DROP TRIGGER orders_unsettled_insert ON orders;
DROP FUNCTION orders_unsettled_follow();
DROP TABLE orders_unsettled;
