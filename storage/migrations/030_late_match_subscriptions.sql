-- Late matching of subscription events: a renewal or a lifecycle event
-- (subscription.cancelled, an overdue notice) that names a subscription the
-- service does not know yet is stored 'unmatched'; creating the
-- subscription queues it again, in the creating transaction. This partial
-- index finds such events by the subscription's provider key among the
-- unmatched events only, so its cost follows them, never the history.
CREATE INDEX inbox_events_unmatched_subscription_idx ON inbox_events (org_id, environment, provider, subscription_id)
    WHERE state = 'unmatched' AND subscription_id IS NOT NULL;

---- create above / drop below ----

DROP INDEX inbox_events_unmatched_subscription_idx;
