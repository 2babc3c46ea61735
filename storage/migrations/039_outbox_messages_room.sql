-- Room on each page for a new version of every message on it. Recording a
-- delivery changes no indexed column of its message, so its update is HOT —
-- a new version on the same page, logged as the bytes it changes, no index
-- entry — when the page has room for it. Migration 034 left 30% of each
-- page free: room for three or four new versions among the nine messages
-- of about 600 bytes (a payload of 300–400) that fill the rest. A
-- dispatcher records a whole batch of deliveries in one transaction, where
-- nothing on the page can be pruned yet, so about half of its updates went
-- to another page: the whole message logged again, payload included, and an
-- entry in each of its three indexes (in the bench's drain, 1,956 of 4,000
-- updates were HOT). Half of each page free holds a new version of each
-- message a page takes, and a message is recorded once in most of its life
-- (a delivery retried is updated once per attempt, between which the page
-- is pruned).
ALTER TABLE outbox_messages SET (fillfactor = 50);

---- create above / drop below ----

ALTER TABLE outbox_messages SET (fillfactor = 70);
