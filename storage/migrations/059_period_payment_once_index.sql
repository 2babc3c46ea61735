---- tern: disable-tx ----
-- The constraint of migration 058: a payment pays one period of a
-- subscription, the periods it marked aside. Built without stopping the
-- table's writers (CONCURRENTLY, outside a transaction), so each statement
-- runs on its own. A build that failed (a duplicate written meanwhile, by
-- a replica older than the rule) leaves an invalid index behind: it is
-- dropped first, so that running the migration again builds it anew.
DROP INDEX CONCURRENTLY IF EXISTS subscription_periods_payment_once;

CREATE UNIQUE INDEX CONCURRENTLY subscription_periods_payment_once ON subscription_periods (subscription_id, payment_id)
    WHERE payment_id IS NOT NULL AND NOT payment_repeated;

---- create above / drop below ----
---- tern: disable-tx ----

DROP INDEX CONCURRENTLY IF EXISTS subscription_periods_payment_once;
