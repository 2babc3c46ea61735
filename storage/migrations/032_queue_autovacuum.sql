-- The queue tables churn: every row is inserted, claimed and deleted within
-- seconds, and each claim scans its index over the entries of rows already
-- gone until a VACUUM removes them. The service vacuums these tables itself
-- (database.queue_vacuum) when its role owns them; this is the backstop for
-- when it does not, or is turned off: autovacuum takes them up after a fixed
-- count of dead rows, not after a fraction of a table that is small by
-- design, and runs on them without its cost delay.
ALTER TABLE inbox_work SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE outbox_work SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE payment_polls SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE subscription_sweeps SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE housekeeping_tasks SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_cost_delay = 0);

---- create above / drop below ----

ALTER TABLE inbox_work RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay);
ALTER TABLE outbox_work RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay);
ALTER TABLE payment_polls RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay);
ALTER TABLE subscription_sweeps RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay);
ALTER TABLE housekeeping_tasks RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay);
