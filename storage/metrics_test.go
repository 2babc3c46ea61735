package storage_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
)

// A scrape reads the database's gauges with one query; when the database
// does not answer, it still succeeds with the pools' statistics and
// fulfillment_db_scrape_success 0.
func TestMetricsCollector(t *testing.T) {
	t.Parallel()
	s, err := storage.Open(context.Background(), pgtest.DB(t), storage.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.MetricsCollector(0))

	want := `
# HELP fulfillment_db_scrape_success 1 when the database's gauges were read at this scrape, 0 when they could not be (they are then left out).
# TYPE fulfillment_db_scrape_success gauge
fulfillment_db_scrape_success %d
# HELP fulfillment_inbox_pending_events Inbox events waiting to be processed.
# TYPE fulfillment_inbox_pending_events gauge
fulfillment_inbox_pending_events 0
# HELP fulfillment_outbox_messages Outbox messages that are not delivered, by state (pending, failed, uncertain).
# TYPE fulfillment_outbox_messages gauge
fulfillment_outbox_messages{state="failed"} 0
fulfillment_outbox_messages{state="pending"} 0
fulfillment_outbox_messages{state="uncertain"} 0
`
	names := []string{"fulfillment_db_scrape_success", "fulfillment_inbox_pending_events", "fulfillment_outbox_messages"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.Replace(want, "%d", "1", 1)), names...); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "fulfillment_db_pool_max_connections"); err != nil || n != 2 {
		t.Errorf("pool gauges: %d, %v; want the main and the lease pool", n, err)
	}

	s.Close() // the database no longer answers this store
	down := "\n# HELP fulfillment_db_scrape_success 1 when the database's gauges were read at this scrape, 0 when they could not be (they are then left out).\n# TYPE fulfillment_db_scrape_success gauge\nfulfillment_db_scrape_success 0\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(down), names...); err != nil {
		t.Errorf("scrape with the database down: %v", err)
	}
	if n, err := testutil.GatherAndCount(reg, "fulfillment_db_pool_acquires_total"); err != nil || n != 2 {
		t.Errorf("pool counters with the database down: %d, %v", n, err)
	}
}
