-- Bulk re-drive runs: events replayed, or outbox messages retried, by
-- filter. A run records its items when it starts (at most 10,000), each
-- once (the primary key), and is applied in batches; an org has at most one
-- run going at a time (the partial unique index), so two operators
-- confirming at once start one run between them.
CREATE TABLE redrive_runs (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id            text        NOT NULL,
    target            text        NOT NULL CHECK (target IN ('events', 'outbox')),
    filter            jsonb       NOT NULL,
    state             text        NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done', 'cancelled')),
    total             int         NOT NULL DEFAULT 0,
    applied           int         NOT NULL DEFAULT 0,
    skipped           int         NOT NULL DEFAULT 0,
    created_by        text        NOT NULL,
    created_by_detail text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    cancelled_by      text
);
CREATE UNIQUE INDEX redrive_runs_one_running ON redrive_runs (org_id) WHERE state = 'running';
CREATE INDEX redrive_runs_org_idx ON redrive_runs (org_id, id);

CREATE TABLE redrive_items (
    run_id  bigint NOT NULL REFERENCES redrive_runs (id),
    item_id bigint NOT NULL,
    state   text   NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'applied', 'skipped')),
    PRIMARY KEY (run_id, item_id)
);
CREATE INDEX redrive_items_pending_idx ON redrive_items (run_id, item_id) WHERE state = 'pending';

---- create above / drop below ----

DROP TABLE redrive_items;
DROP TABLE redrive_runs;
