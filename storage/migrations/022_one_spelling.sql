-- One spelling: the SLA task of housekeeping is named fulfillment_sla, like
-- its configuration key (housekeeping.fulfillment_sla) and the task label of
-- the housekeeping metrics; the index it reads is renamed to match. A
-- replica still running the previous version does not know the new name:
-- its housekeeper fails that task's runs, which the upgraded replicas do,
-- until it is upgraded too.

ALTER TABLE housekeeping_tasks DROP CONSTRAINT housekeeping_tasks_task_check;
UPDATE housekeeping_tasks SET task = 'fulfillment_sla' WHERE task = 'fulfilment_sla';
ALTER TABLE housekeeping_tasks
    ADD CONSTRAINT housekeeping_tasks_task_check CHECK (task IN ('fulfillment_sla', 'raw_body_purge'));
ALTER INDEX orders_awaiting_fulfilment_idx RENAME TO orders_awaiting_fulfillment_idx;

---- create above / drop below ----

ALTER INDEX orders_awaiting_fulfillment_idx RENAME TO orders_awaiting_fulfilment_idx;
ALTER TABLE housekeeping_tasks DROP CONSTRAINT housekeeping_tasks_task_check;
UPDATE housekeeping_tasks SET task = 'fulfilment_sla' WHERE task = 'fulfillment_sla';
ALTER TABLE housekeeping_tasks
    ADD CONSTRAINT housekeeping_tasks_task_check CHECK (task IN ('fulfilment_sla', 'raw_body_purge'));
