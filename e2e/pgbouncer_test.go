package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
	"github.com/fulfillplatform/fulfillment/rig/pgcluster"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// behindBouncer points cfg at a PgBouncer in mode in front of dbURL: in
// transaction mode, the sessions (liveness, LISTEN, migrations) go straight
// to PostgreSQL; in session mode everything goes through PgBouncer, with a
// pool that fits its default pool size of 20 server connections.
func behindBouncer(t *testing.T, mode, dbURL string) (b *pgcluster.Bouncer, serveURL, sessionURL string) {
	t.Helper()
	b = pgtest.Bouncer(t, mode)
	pooled := b.URL(pgtest.Database(dbURL))
	if mode == "transaction" {
		return b, pooled, dbURL
	}
	return b, pooled, ""
}

// The whole path through PgBouncer with its default settings, in each pool
// mode: orders created, Yolfi confirmations delivered twice and
// concurrently, a T-Bank payment started against the fake bank and paid,
// outbox deliveries, the order event feed, listings. Every order is
// fulfilled once, every message delivered once, every fulfillment announced.
func TestBehindPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dbURL := pgtest.DB(t)
			bouncer, serveURL, sessionURL := behindBouncer(t, mode, dbURL)
			crm := startReceiver(t, true, nil)
			relay := newTBankRelay(t)
			bank := startFakeBank(t, fakebank.Options{}, relay)
			s := startReplicaWith(t, dbURL, func(c *config.Config) {
				c.Database.URL, c.Database.SessionURL = serveURL, sessionURL
				if mode == "session" {
					c.Database.MaxConns = 6 // + 4 lease, 1 liveness, 3 listeners ≤ 20
				}
				c.Endpoints = append(c.Endpoints, tbankEndpoints(t, bank, relay, config.Secret{Value: []byte(tbankPassword)})...)
				c.StatusPoll = config.StatusPoll{Queue: config.Queue{Disabled: true}}
				withDestinations(destination(t, "crm", crm, true, 5*time.Second))(c)
			})
			relay.forwardTo(t, s.ingestURL)
			tb := &tbankStack{stack: s, bank: bank}
			feed, stopFeed := s.watch(t, adminToken, "")
			defer stopFeed()

			const n = 20
			orders := make([]string, n)
			for i := range orders {
				orders[i] = s.createExternalOrder(t, fmt.Sprintf("pgb-%d", i), "crm").GetId()
			}
			evs := make([]yolfi.Payload, n)
			for i := range evs {
				evs[i] = event(yolfi.TypePaymentConfirmed, fmt.Sprintf("pgb-%d", i), fmt.Sprintf("inv_pgb-%d", i))
			}
			codes := make([]int, 2*n)
			race(2*n, func(i int) { codes[i] = s.send(t, liveEP, liveSecret, evs[i%n]) })
			for i, code := range codes {
				if code != http.StatusOK {
					t.Errorf("webhook %d answered %d, want 200", i, code)
				}
			}

			rub := tb.createRUBOrder(t, "pgb-rub")
			start, err := tb.startPayment(rub.GetId(), tbankFail, false)
			if err != nil {
				t.Fatalf("StartPayment through PgBouncer: %v", err)
			}
			if err := bank.Pay(start.GetPaymentId()); err != nil {
				t.Fatal(err)
			}
			tb.waitBank(t)
			s.settle(t)

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
				return s.count(t, "SELECT count(*) FROM orders WHERE state = 'fulfilled'") == n+1
			})
			for i, id := range orders {
				if e := s.effects(t, id); e.State != "fulfilled" || e.Licenses != 1 || len(e.Items) != 0 {
					t.Errorf("order pgb-%d: %v; want fulfilled once, no item", i, e)
				}
			}
			if e := s.effects(t, rub.GetId()); e.State != "fulfilled" || e.Licenses != 1 || e.Attempts != 1 {
				t.Errorf("T-Bank order: %v; want fulfilled once", e)
			}
			if got := crm.Doubled(); len(got) != 0 || crm.TotalEffects() != n {
				t.Errorf("receiver: doubled %v, %d effects; want %d, none doubled", got, crm.TotalEffects(), n)
			}

			want := map[string]bool{rub.GetId(): true}
			for _, id := range orders {
				want[id] = true
			}
			fulfilledSeen := map[string]int{}
			for len(fulfilledSeen) < len(want) {
				e, err := feed.Recv()
				if err != nil {
					t.Fatalf("feed after %d fulfillments: %v", len(fulfilledSeen), err)
				}
				if e.GetTopic() == string(fulfillment.TopicOrderFulfilled) && want[e.GetOrderId()] {
					fulfilledSeen[e.GetOrderId()]++
				}
			}

			for range 5 {
				var token string
				for page := 0; page < 3; page++ {
					resp, err := s.client.ListOrders(authed(adminToken), &fulfillmentv1.ListOrdersRequest{PageSize: 8, PageToken: token})
					if err != nil {
						t.Fatalf("ListOrders through PgBouncer: %v", err)
					}
					if token = resp.GetNextPageToken(); token == "" {
						break
					}
				}
			}

			// The pooler gone: a webhook is answered 503 (retry), never 500.
			if err := bouncer.Stop(); err != nil {
				t.Fatal(err)
			}
			late := event(yolfi.TypePaymentConfirmed, "pgb-late", "inv_pgb-late")
			if code := s.send(t, liveEP, liveSecret, late); code != http.StatusServiceUnavailable {
				t.Errorf("webhook with PgBouncer stopped answered %d, want 503", code)
			}
		})
	}
}

// A replica SIGKILLed while it holds a claim, behind PgBouncer in each
// mode: the live replica processes the claim within 5 s. In session mode
// the dead replica's liveness lock is on a server session PgBouncer keeps:
// PgBouncer resets that session (DISCARD ALL) when the client goes, which
// frees the lock.
func TestKillBehindPgBouncer(t *testing.T) {
	t.Parallel()
	bin := procFailpointBuild.binary(t)
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ps := newProcService(t, bin)
			ps.queueOnly = true // (a claim to kill)
			_, ps.serveURL, ps.sessionURL = behindBouncer(t, mode, ps.dbURL)
			if mode == "session" {
				ps.configure = func(c *config.Config) { c.Database.MaxConns = 3 } // two replicas ≤ 20 server sessions
			}
			_, _, took := killClaimHolder(t, ps, "pgb-kill")
			t.Logf("%s pooling: processed by the live replica %v after the kill", mode, took.Round(time.Millisecond))
			if took > recoveryBound {
				t.Errorf("processed %v after the kill, want within %v", took, recoveryBound)
			}
		})
	}
}

// Behind a transaction pooler without a session URL, the service refuses to
// start (serve with --migrate, and without), with one line naming the key to
// set.
func TestTransactionPoolerNeedsSessionURL(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.DB(t)
	_, pooled, _ := behindBouncer(t, "transaction", dbURL)
	for _, migrate := range []bool{true, false} {
		cfg := testConfig(pooled)
		cfg.Database.Migrate = migrate
		a, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			a.Close()
			t.Fatalf("migrate %v: the service started behind a transaction pooler without database.session_url", migrate)
		}
		if msg := err.Error(); !strings.Contains(msg, "database.session_url") || strings.Contains(msg, "\n") || strings.Contains(msg, "127.0.0.1") {
			t.Errorf("migrate %v: error %q; want one line naming database.session_url, without the URL", migrate, msg)
		}
	}
}
