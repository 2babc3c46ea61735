-- Room on each page for the paid version of every order on it. Orders are
-- created one after another and fill their pages together; their payments
-- arrive together too, and a batch decides many of them in one
-- transaction, in which no page can be pruned. With the 20% room of
-- migration 033, a page had space for the new versions of about a fifth
-- of its orders: the others' updates went to another page, wrote an entry
-- into each of the table's five indexes, and logged their row whole
-- (28 of the 40 updates of a batch of forty created in a row; 309 of 786
-- in group commits of 16 payments decided on receipt, where pg_waldump
-- measured about 170 bytes of WAL per payment more on average). The room
-- costs space: the table takes about twice the pages it did. An order's paid
-- version is larger than its first (its payment's time and references:
-- 224 bytes become 256 in the tests' orders), so half of each page is not
-- quite enough room either (38 of 40 updates HOT); at 40% full, a page
-- has room for a paid version of each of its orders up to half again
-- their size. As for the inbox's events (migration 035) and the outbox's
-- messages (039). The setting applies to the pages written from now on.
ALTER TABLE orders SET (fillfactor = 40);

---- create above / drop below ----

ALTER TABLE orders SET (fillfactor = 80);
