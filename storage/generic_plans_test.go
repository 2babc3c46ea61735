package storage_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// Every statement of a batch's pipelined transaction — one decided on
// receipt, one of the inbox processor — runs on a generic plan, its first
// statement too: PostgreSQL plans each once per connection instead of at
// every batch, which it would for statements taking arrays (in its
// default mode, the first five runs of a prepared statement are always
// planned for their parameters). The store under test runs nothing but
// those transactions, one at a time, and the notifications sent after
// their commits; another store of the same database creates the orders
// and queues the events.
func TestPipelinedBatchesRunOnGenericPlans(t *testing.T) {
	t.Parallel()
	const batches = 8
	for _, decide := range []bool{true, false} {
		t.Run(map[bool]string{true: "decided on receipt", false: "inbox processor"}[decide], func(t *testing.T) {
			t.Parallel()
			s, other, _ := batchesOnlyStore(t, decide)
			ctx := context.Background()
			for i := range batches {
				mo := fmt.Sprintf("m-%d", i)
				if _, _, err := other.OrderCreate(ctx, spec(t, "org_a", mo)); err != nil {
					t.Fatal(err)
				}
				ev := confirmedEvent(fmt.Sprintf("evt_%d", i), mo)
				if decide {
					if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if _, err := other.InboxInsert(ctx, ev, []byte("{}")); err != nil {
					t.Fatal(err)
				}
				claims, err := other.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 5})
				if err != nil || len(claims) != 1 {
					t.Fatalf("claim = %v, %v; want the queued event", claims, err)
				}
				if _, err := s.InboxProcessEvents(ctx, []int64{claims[0].ID}, "w"); err != nil {
					t.Fatal(err)
				}
			}
			plans, err := s.PreparedPlans(ctx)
			if err != nil {
				t.Fatal(err)
			}
			runs := map[string]int64{} // by statement, over the connections
			for _, p := range plans {
				if strings.HasPrefix(p.Statement, "SELECT pg_notify(") {
					continue // after the commit, outside the transaction
				}
				if p.Custom > 0 {
					t.Errorf("planned for its parameters %d times of %d: %s", p.Custom, p.Custom+p.Generic, oneLine(p.Statement))
				}
				runs[p.Statement] += p.Generic + p.Custom
			}
			everyBatch := 0
			for _, n := range runs {
				if n >= batches {
					everyBatch++
				}
			}
			if everyBatch < 4 {
				t.Errorf("%d prepared statements ran in each of the %d batches; want the batch's statements (4 or more)", everyBatch, batches)
			}
		})
	}
}

// batchesOnlyStore opens a store for the batches under test (deciding on
// receipt or not; one group commit), and another store of the same
// database, with a connection of its own, for everything else.
func batchesOnlyStore(t *testing.T, decide bool) (s, other *storage.Store, conn *pgx.Conn) {
	t.Helper()
	other, conn, url := openStore(t, storage.Options{MaxConns: 4})
	s, err := storage.Open(context.Background(), url, storage.Options{MaxConns: 2, InsertFlushers: 1, DecideOnReceipt: decide})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, other, conn
}

// oneLine is the start of a statement's text on one line, for a message.
func oneLine(sql string) string {
	sql = strings.Join(strings.Fields(sql), " ")
	if len(sql) > 100 {
		sql = sql[:100] + "…"
	}
	return sql
}

// The look-ups of a decided batch probe their keys' indexes even when
// their plans were made on nearly empty tables — a new database's first
// webhooks — where a scan of the whole table costs least: PostgreSQL keeps
// a generic plan until the next ANALYZE, by which time the scan may read
// thousands of rows for each webhook.
func TestBatchLookupsProbeKeysWhateverTheTablesSize(t *testing.T) {
	t.Parallel()
	s, other, conn := batchesOnlyStore(t, true)
	ctx := context.Background()
	for i := range 4 {
		mo := fmt.Sprintf("m-%d", i)
		if _, _, err := other.OrderCreate(ctx, spec(t, "org_a", mo)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.InboxInsert(ctx, confirmedEvent(fmt.Sprintf("evt_%d", i), mo), []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// As autovacuum would soon: the tables' statistics say one
			// page of a few rows, and the next batches' plans are made
			// on them.
			if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct{ what, fragment, args string }{
		{"stored events", "set_config('lock_timeout'", `'50ms', '{yolfi}', '{org_a}', '{live}', '{evt_none}'`},
		{"payment attempts", "FROM payment_attempts a", ""},
		{"recorded refunds", "FROM payment_refunds r", ""},
	} {
		plans, err := s.ExplainPrepared(ctx, c.fragment, c.args)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if len(plans) == 0 {
			t.Errorf("%s: no prepared statement reads them (%q)", c.what, c.fragment)
		}
		for _, p := range plans {
			if strings.Contains(p, "Seq Scan") || !strings.Contains(p, "Index") {
				t.Errorf("%s: read by a scan of the table, not by their key's index:\n%s", c.what, p)
			}
		}
	}
}
