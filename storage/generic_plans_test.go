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
				runBatch(t, s, other, decide, i)
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
			if everyBatch < 6 {
				t.Errorf("%d prepared statements ran in each of the %d batches; want the batch's statements (6 or more)", everyBatch, batches)
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

// The look-ups of a batch probe their keys' indexes even when their plans
// were made on the statistics of nearly empty tables — a new database's
// first webhooks — where a scan of the whole table, or of a whole index,
// costs least: PostgreSQL keeps a generic plan until the next ANALYZE, by
// which time the scan may read thousands of rows for each webhook. Each
// look-up's table must be read by an index scan with an index condition.
func TestBatchLookupsProbeKeysWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	type lookup struct{ what, fragment, args, table string }
	attempts := lookup{"payment attempts", "FROM payment_attempts a", "", "payment_attempts"}
	refunds := lookup{"recorded refunds", "FROM payment_refunds r", "", "payment_refunds"}
	for _, c := range []struct {
		decide  bool
		lookups []lookup
	}{
		{true, []lookup{{"stored events", "nextval('inbox_events_id_seq')", `'{yolfi}', '{org_a}', '{live}', '{evt_none}'`, "inbox_events"}, attempts, refunds}},
		{false, []lookup{{"leased events", "DELETE FROM inbox_work", `'{1}', 'w'`, "inbox_events"}, attempts, refunds}},
	} {
		t.Run(map[bool]string{true: "decided on receipt", false: "inbox processor"}[c.decide], func(t *testing.T) {
			t.Parallel()
			s, other, conn := batchesOnlyStore(t, c.decide)
			ctx := context.Background()
			for i := range 4 {
				runBatch(t, s, other, c.decide, i)
				if i == 0 {
					// As autovacuum would soon: the tables' statistics say
					// one page of a few rows, and the next batches' plans
					// are made on them.
					if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, l := range c.lookups {
				plans, err := s.ExplainPrepared(ctx, l.fragment, l.args)
				if err != nil {
					t.Fatalf("%s: %v", l.what, err)
				}
				if len(plans) == 0 {
					t.Errorf("%s: no prepared statement reads them (%q)", l.what, l.fragment)
				}
				for _, p := range plans {
					if err := probes(p, l.table); err != nil {
						t.Errorf("%s: %v:\n%s", l.what, err, p)
					}
				}
			}
		})
	}
}

// probes says whether plan reads table by index scans with an index
// condition only.
func probes(plan, table string) error {
	lines := strings.Split(plan, "\n")
	found := false
	for i, l := range lines {
		if !strings.Contains(l, " on "+table+" ") || strings.Contains(l, "Subquery Scan") {
			continue // (a subquery named after the table is not a read of it)
		}
		found = true
		if !strings.Contains(l, "Index Scan") && !strings.Contains(l, "Index Only Scan") {
			return fmt.Errorf("%s read by a scan of the table, not by its key's index", table)
		}
		if i+1 == len(lines) || !strings.Contains(lines[i+1], "Index Cond") {
			return fmt.Errorf("%s read by a scan of a whole index, not by a probe of its key", table)
		}
	}
	if !found {
		return fmt.Errorf("%s not read", table)
	}
	return nil
}

// runBatch runs batch i: a payment of a new order, decided on receipt by
// s, or stored by other and processed by s's inbox processor.
func runBatch(t *testing.T, s, other *storage.Store, decide bool, i int) {
	t.Helper()
	ctx := context.Background()
	mo := fmt.Sprintf("m-%d", i)
	if _, _, err := other.OrderCreate(ctx, spec(t, "org_a", mo)); err != nil {
		t.Fatal(err)
	}
	ev := confirmedEvent(fmt.Sprintf("evt_%d", i), mo)
	if decide {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		return
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
