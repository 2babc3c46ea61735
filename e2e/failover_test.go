package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/pgcluster"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// A primary with a synchronous standby (streaming replication, both
// started here from the machine's PostgreSQL binaries), the service on a
// multi-host URL that wants the read-write one. Webhooks arrive under load;
// the primary is SIGKILLed and the standby promoted. The service reconnects
// by itself; every webhook it acknowledged — before, during or after the
// failover — is processed exactly once, every order is fulfilled once, and
// no delivery reaches its receiver twice.
func TestPrimaryFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := startFailoverCluster(t, "primary", nil)
	standby := startFailoverCluster(t, "standby", primary)
	waitStreaming(t, primary)

	crm := startReceiver(t, true, nil)
	dbURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/fulfillment?sslmode=disable&target_session_attrs=read-write",
		primary.Port(), standby.Port())
	cfg := testConfig(dbURL)
	cfg.Database.Migrate = true
	withDestinations(destination(t, "crm", crm, true, 5*time.Second))(cfg)
	// The run goes through a database outage on purpose: how it stops is
	// not what this test checks.
	a := runApp(t, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), true)
	svc := stackOf(t, a, dbURL)

	const n = 60
	orders := make([]string, n)
	for i := range orders {
		orders[i] = svc.createExternalOrder(t, fmt.Sprintf("fo-%d", i), "crm").GetId()
	}

	// Each confirmation is sent until it is acknowledged, as a provider
	// retries; acked records when each one first was.
	var (
		acked  [n]time.Time // when each webhook was first acknowledged
		sentAt [n]time.Time // when that acknowledged request was sent
		ackedN atomic.Int32
		wg     sync.WaitGroup
		next   atomic.Int32
	)
	evs := make([]yolfi.Payload, n)
	for i := range evs {
		evs[i] = event(yolfi.TypePaymentConfirmed, fmt.Sprintf("fo-%d", i), fmt.Sprintf("inv_fo-%d", i))
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				deadline := time.Now().Add(60 * time.Second)
				for time.Now().Before(deadline) {
					sent := time.Now()
					if code, _ := postYolfi(client, svc.ingestURL, evs[i]); code == http.StatusOK {
						acked[i], sentAt[i] = time.Now(), sent
						ackedN.Add(1)
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(20 * time.Millisecond) // about 200 webhooks/s in all
			}
		})
	}
	for ackedN.Load() < n/3 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := primary.Crash(); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()              // the postmaster is gone
	time.Sleep(500 * time.Millisecond) // failure detection, in a real deployment
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	wg.Wait()

	// Recovery: the first acknowledgement of a request sent once the
	// primary was gone.
	var firstAfter time.Time
	for i, at := range acked {
		if at.IsZero() {
			t.Errorf("webhook fo-%d never acknowledged", i)
		}
		if sentAt[i].After(crashed) && (firstAfter.IsZero() || at.Before(firstAfter)) {
			firstAfter = at
		}
	}
	if firstAfter.IsZero() {
		t.Fatal("no webhook sent after the crash was acknowledged")
	}
	t.Logf("failover: acknowledging again %v after the primary was killed (%v after the promotion)",
		firstAfter.Sub(crashed).Round(time.Millisecond), firstAfter.Sub(promoted).Round(time.Millisecond))

	svc.settle(t)
	// An order with an external line is fulfilled once its line is
	// delivered.
	waitFor(t, "every line delivered", func() bool {
		for _, id := range orders {
			if crm.Effects(fulfillment.LineKey(id, 1)) != 1 {
				return false
			}
		}
		return true
	})
	waitFor(t, "every order fulfilled", func() bool {
		return svc.count(t, "SELECT count(*) FROM orders WHERE state = 'fulfilled'") == n
	})
	for i, id := range orders {
		if e := svc.effects(t, id); e.State != "fulfilled" || e.Licenses != 1 || len(e.Items) != 0 {
			t.Errorf("order fo-%d: %v; want fulfilled once", i, e)
		}
	}
	if got := svc.count(t, "SELECT count(*) FROM inbox_events WHERE state = 'processed' AND decision = 'fulfilled'"); got != n {
		t.Errorf("%d events fulfilled an order, want %d (one per acknowledged webhook)", got, n)
	}
	if got := crm.Doubled(); len(got) != 0 || crm.TotalEffects() != n {
		t.Errorf("receiver: doubled %v, %d effects; want %d, none doubled", got, crm.TotalEffects(), n)
	}
}

// startFailoverCluster starts a cluster of its own for the failover test: a
// primary, or (of set) a standby of of.
func startFailoverCluster(t *testing.T, name string, of *pgcluster.Cluster) *pgcluster.Cluster {
	t.Helper()
	dir := pgtest.ServerDir(t, "failover-"+name+"-")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, StandbyOf: of})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// waitStreaming makes primary's commits wait for a synchronous standby
// (synchronous_commit stays on, its default), then waits until its standby
// streams as one. The standby keeps no such setting: once promoted, it
// commits alone.
func waitStreaming(t *testing.T, primary *pgcluster.Cluster) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"} {
		if _, err := pool.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a synchronous standby streaming", func() bool {
		var n int
		_ = pool.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'").Scan(&n)
		return n == 1
	})
}

// postYolfi signs ev with the live secret and posts it; a transport error
// is code 0.
func postYolfi(c *http.Client, ingestURL string, ev yolfi.Payload) (int, error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return 0, err
	}
	req, err := yolfi.NewRequest(context.Background(), ingestURL+"/webhooks/"+liveEP, []byte(liveSecret), body, ev.ID)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
