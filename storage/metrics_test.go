package storage_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
)

// A scrape reads the database's gauges with one query; when the database
// does not answer, it still succeeds with the pools' statistics and
// fulfillment_db_scrape_success 0. Undelivered outbox messages are counted
// by destination: every configured one has each state, at 0 when it has
// none, and one no longer configured has those it has messages in; so are
// disabled destinations (every configured one at 0 unless disabled). The
// housekeeping tasks' last runs are the database's.
func TestMetricsCollector(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	s, err := storage.Open(context.Background(), url, storage.Options{MaxConns: 4,
		Subscriptions: map[fulfillment.Topic][]string{fulfillment.TopicOrderFulfilled: {"crm", "erp"}, fulfillment.TopicOrderRefunded: {"crm"}}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(context.Background(), `
		INSERT INTO outbox_messages (destination_id, topic, idempotency_key, org_id, environment, required, payload, state)
		VALUES ('erp', 'order.fulfilled', 'k1', 'org_a', 'live', false, '{}', 'pending'),
			('erp', 'order.fulfilled', 'k2', 'org_a', 'live', false, '{}', 'pending'),
			('erp', 'order.fulfilled', 'k3', 'org_a', 'live', false, '{}', 'uncertain'),
			('erp', 'order.fulfilled', 'k4', 'org_a', 'live', false, '{}', 'delivered'),
			('old', 'order.fulfilled', 'k5', 'org_a', 'live', false, '{}', 'failed'),
			('crm', 'order.fulfilled', 'k6', 'org_a', 'live', false, '{}', 'pending');
		UPDATE housekeeping_tasks SET last_run_at = '2026-01-02T03:04:05.5Z' WHERE task = 'raw_body_purge';
		INSERT INTO outbox_destinations (id, disabled_at, disabled_reason) VALUES ('erp', now(), 'answered 410 Gone'), ('old', now(), 'by ops')`)
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
# HELP fulfillment_outbox_messages Outbox messages that are not delivered, by destination and state (pending, failed, uncertain).
# TYPE fulfillment_outbox_messages gauge
fulfillment_outbox_messages{destination="crm",state="failed"} 0
fulfillment_outbox_messages{destination="crm",state="pending"} 1
fulfillment_outbox_messages{destination="crm",state="uncertain"} 0
fulfillment_outbox_messages{destination="erp",state="failed"} 0
fulfillment_outbox_messages{destination="erp",state="pending"} 2
fulfillment_outbox_messages{destination="erp",state="uncertain"} 1
fulfillment_outbox_messages{destination="old",state="failed"} 1
# HELP fulfillment_outbox_destination_disabled 1 while deliveries to the destination are stopped (disabled by a person, or by its answer 410 Gone), 0 while they go on.
# TYPE fulfillment_outbox_destination_disabled gauge
fulfillment_outbox_destination_disabled{destination="crm"} 0
fulfillment_outbox_destination_disabled{destination="erp"} 1
fulfillment_outbox_destination_disabled{destination="old"} 1
# HELP fulfillment_housekeeping_last_success_timestamp_seconds When the housekeeping task last completed a run, on any replica (0: never).
# TYPE fulfillment_housekeeping_last_success_timestamp_seconds gauge
fulfillment_housekeeping_last_success_timestamp_seconds{task="fulfillment_sla"} 0
fulfillment_housekeeping_last_success_timestamp_seconds{task="raw_body_purge"} 1.7673230455e+09
`
	names := []string{"fulfillment_db_scrape_success", "fulfillment_inbox_pending_events", "fulfillment_outbox_messages", "fulfillment_outbox_destination_disabled",
		"fulfillment_housekeeping_last_success_timestamp_seconds"}
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
