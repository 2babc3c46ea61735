package e2e_test

// The order event feed: a consumer that disconnects and resumes from the
// cursor of the last event it handled receives every event of its org once,
// in the feed's order, and none of another org.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

const (
	orgB         = "org_b"
	orgBEndpoint = "yolfi-org-b"
	orgBSecret   = "ywhsec_orgb_0123456789abcdef"
)

// watch opens the feed for token after cursor.
func (s *stack) watch(t *testing.T, token, cursor string) (fulfillmentv1.FulfillmentService_WatchOrderEventsClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	st, err := s.client.WatchOrderEvents(ctx, &fulfillmentv1.WatchOrderEventsRequest{Cursor: cursor})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return st, cancel
}

// next receives n events from st.
func next(t *testing.T, st fulfillmentv1.FulfillmentService_WatchOrderEventsClient, n int) []*fulfillmentv1.WatchOrderEventsResponse {
	t.Helper()
	var got []*fulfillmentv1.WatchOrderEventsResponse
	for range n {
		e, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(got), n, err)
		}
		got = append(got, e)
	}
	return got
}

// payNewOrder creates a license order for org and pays it through the
// org's endpoint; it returns the order id.
func (s *stack) payNewOrder(t *testing.T, org, merchantOrderID string) string {
	t.Helper()
	resp, err := s.client.CreateOrder(authed(adminToken), &fulfillmentv1.CreateOrderRequest{
		OrgId: org, Environment: "live", MerchantOrderId: merchantOrderID,
		Lines: []*fulfillmentv1.OrderLine{
			{Sku: defaultSKU, Kind: "license", Quantity: 1, UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 2500}},
		},
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25.000000"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := event(yolfi.TypePaymentConfirmed, merchantOrderID, "inv_"+merchantOrderID)
	endpoint, secret := liveEP, liveSecret
	if org == orgB {
		ev.OrgID, endpoint, secret = orgB, orgBEndpoint, orgBSecret
	}
	if code := s.send(t, endpoint, secret, ev); code != http.StatusOK {
		t.Fatalf("payment webhook answered %d", code)
	}
	return resp.GetOrder().GetId()
}

func TestOrderEventFeedResumes(t *testing.T) {
	t.Parallel()
	s := startReplicaWith(t, pgtest.DB(t), func(c *config.Config) {
		c.Endpoints = append(c.Endpoints, config.Endpoint{ID: orgBEndpoint, Provider: "yolfi", Org: orgB, Environment: "live",
			Secrets: []config.Secret{{Value: []byte(orgBSecret)}}})
	})
	var wantA []string // org_a's orders, in payment order
	pay := func(org, mid string) {
		id := s.payNewOrder(t, org, mid)
		if org == orgA {
			wantA = append(wantA, id)
		}
	}

	st, cancel := s.watch(t, orgAToken, "")
	for i, org := range []string{orgA, orgB, orgA, orgB, orgA} {
		pay(org, "feed-1-"+string(rune('a'+i)))
	}
	first := next(t, st, 3)
	cancel() // the consumer goes away...
	if _, err := st.Recv(); status.Code(err) != codes.Canceled && !errors.Is(err, io.EOF) {
		t.Fatalf("after cancel: %v", err)
	}
	for i, org := range []string{orgB, orgA, orgA} {
		pay(org, "feed-2-"+string(rune('a'+i)))
	}
	// ... and comes back with the cursor of the last event it handled.
	st, cancel = s.watch(t, orgAToken, first[len(first)-1].GetCursor())
	defer cancel()
	second := next(t, st, 2)
	all := slices.Concat(first, second)

	var gotOrders []string
	for i, e := range all {
		if e.GetOrgId() != orgA || e.GetTopic() != "order.fulfilled" || e.GetPayload() == "" {
			t.Errorf("event %d = %v", i, e)
		}
		gotOrders = append(gotOrders, e.GetOrderId())
	}
	sorted := slices.Clone(gotOrders)
	slices.Sort(sorted)
	want := slices.Clone(wantA)
	slices.Sort(want)
	if !slices.Equal(sorted, want) || len(slices.Compact(sorted)) != len(want) {
		t.Fatalf("events for orders %v, want each of %v once", gotOrders, wantA)
	}
	// In order: the same sequence as one uninterrupted read from the start
	// (an admin sees org_b's events too, in between).
	whole, cancelWhole := s.watch(t, adminToken, "")
	defer cancelWhole()
	var onlyA []string
	for _, e := range next(t, whole, 8) {
		if e.GetOrgId() == orgA {
			onlyA = append(onlyA, e.GetOrderId())
		}
	}
	if !slices.Equal(onlyA, gotOrders) {
		t.Errorf("resumed sequence %v differs from the uninterrupted one %v", gotOrders, onlyA)
	}
	// Each order's history names its feed event, at the feed's cursor.
	for _, e := range all {
		o, err := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: e.GetOrderId()})
		if err != nil {
			t.Fatal(err)
		}
		fe := o.GetOrder().GetHistory().GetFeedEvents()
		if len(fe) != 1 || fe[0].GetCursor() != e.GetCursor() || fe[0].GetTopic() != e.GetTopic() ||
			!fe[0].GetCreateTime().AsTime().Equal(e.GetCreateTime().AsTime()) {
			t.Errorf("order %s history feed events = %v, want the one the feed carried (%s at %s)", e.GetOrderId(), fe, e.GetTopic(), e.GetCursor())
		}
	}

	// Bad cursors, other orgs and missing scopes are refused.
	for _, tc := range []struct {
		token string
		req   *fulfillmentv1.WatchOrderEventsRequest
		code  codes.Code
	}{
		{orgAToken, &fulfillmentv1.WatchOrderEventsRequest{Cursor: "nonsense"}, codes.InvalidArgument},
		// Well formed, past every event the database holds.
		{orgAToken, &fulfillmentv1.WatchOrderEventsRequest{Cursor: "999999999999.1"}, codes.OutOfRange},
		{orgAToken, &fulfillmentv1.WatchOrderEventsRequest{OrgId: orgB}, codes.PermissionDenied},
		{orgAToken, &fulfillmentv1.WatchOrderEventsRequest{Environment: "staging"}, codes.InvalidArgument},
		{ingestToken, &fulfillmentv1.WatchOrderEventsRequest{}, codes.PermissionDenied},
		{"tok-nobody-0123456789abcdef", &fulfillmentv1.WatchOrderEventsRequest{}, codes.Unauthenticated},
	} {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tc.token), 10*time.Second)
		st, err := s.client.WatchOrderEvents(ctx, tc.req)
		if err == nil {
			_, err = st.Recv()
		}
		cancel()
		if status.Code(err) != tc.code {
			t.Errorf("%v with token %s: %v, want %v", tc.req, tc.token, err, tc.code)
		}
	}
}

// A feed stream never ends on its own, so a shutting-down server ends it
// with UNAVAILABLE at once — it would otherwise hold the graceful stop for
// its whole grace period — and the consumer resumes from its cursor.
func TestOrderEventFeedEndsAtShutdown(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	a, err := app.New(ctx, testConfig(pgtest.DB(t)), slog.New(slog.NewJSONHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	<-a.Ready()
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	s := &stack{client: fulfillmentv1.NewFulfillmentServiceClient(conn)}
	st, cancel := s.watch(t, adminToken, "")
	defer cancel()
	if _, err := st.Header(); err != nil { // the stream is open
		t.Fatal(err)
	}

	stop()
	_, err = st.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("feed at shutdown ended with %v, want UNAVAILABLE saying the server is shutting down", err)
	}
	if err := <-done; err != nil {
		t.Errorf("service stopped with error: %v", err)
	}
}

// Fifty idle streams cost the database one reader, not fifty: the scans of
// order_events while they wait stay those of one poll a second. Then one
// paid order reaches every stream once, and org_a's streams never see
// org_b's.
func TestOrderEventFeedOneReaderPerProcess(t *testing.T) {
	t.Parallel()
	s := startReplicaWith(t, pgtest.DB(t), func(c *config.Config) {
		c.Endpoints = append(c.Endpoints, config.Endpoint{ID: orgBEndpoint, Provider: "yolfi", Org: orgB, Environment: "live",
			Secrets: []config.Secret{{Value: []byte(orgBSecret)}}})
	})
	const streams = 50
	type watcher struct {
		st    fulfillmentv1.FulfillmentService_WatchOrderEventsClient
		orgA  bool
		stop  context.CancelFunc
		count chan string // order ids received
	}
	ws := make([]*watcher, streams)
	for i := range ws {
		token := adminToken
		if i%2 == 1 {
			token = orgAToken
		}
		st, stop := s.watch(t, token, "")
		w := &watcher{st: st, orgA: token == orgAToken, stop: stop, count: make(chan string, 16)}
		ws[i] = w
		go func() {
			for {
				e, err := w.st.Recv()
				if err != nil {
					close(w.count)
					return
				}
				w.count <- e.GetOrderId()
			}
		}()
	}
	t.Cleanup(func() {
		for _, w := range ws {
			w.stop()
		}
	})
	scans := func() int {
		return s.count(t, "SELECT (coalesce(seq_scan, 0) + coalesce(idx_scan, 0))::int FROM pg_stat_user_tables WHERE relname = 'order_events'")
	}
	// The streams are all following once their first reads are counted:
	// a backend publishes its counts when it goes idle, or up to 10 s
	// later when it published less than a second before. Wait until the
	// count settles (one reader's pace: a scan a second).
	before := scans()
	for settle := time.Now().Add(15 * time.Second); time.Now().Before(settle); {
		time.Sleep(1500 * time.Millisecond)
		n := scans()
		settled := n-before <= 3
		before = n
		if settled {
			break
		}
	}
	const window = 5 * time.Second
	time.Sleep(window)
	// PostgreSQL publishes a busy backend's counts at most once a second.
	time.Sleep(1500 * time.Millisecond)
	idle := scans() - before
	t.Logf("%d idle streams: %d scans of order_events in %v", streams, idle, window)
	if idle > 20 {
		t.Errorf("%d idle streams scanned order_events %d times in %v; want about one reader's (one a second), not one per stream", streams, idle, window)
	}

	b := s.payNewOrder(t, orgB, "feed-hub-b")
	a := s.payNewOrder(t, orgA, "feed-hub-a")
	// The two orders are fulfilled in either order: an every-org stream
	// waits for both, an org_a stream for org_a's, then a moment more for
	// anything it must not see (the hub hands one batch to every stream).
	for i, w := range ws {
		seen := map[string]int{}
		done := func() bool { return seen[a] > 0 && (w.orgA || seen[b] > 0) }
		deadline := time.After(15 * time.Second)
		for !done() {
			select {
			case id, ok := <-w.count:
				if !ok {
					t.Fatalf("stream %d ended", i)
				}
				seen[id]++
			case <-deadline:
				t.Fatalf("stream %d (org_a only: %v): not every expected event within 15s (saw %v)", i, w.orgA, seen)
			}
		}
		settle := time.After(200 * time.Millisecond)
	drain:
		for {
			select {
			case id, ok := <-w.count:
				if !ok {
					break drain
				}
				seen[id]++
			case <-settle:
				break drain
			}
		}
		if !w.orgA && seen[b] != 1 || w.orgA && seen[b] != 0 || seen[a] != 1 {
			t.Errorf("stream %d (org_a only: %v): saw %v; want org_a's order once, org_b's once unless org_a only", i, w.orgA, seen)
		}
	}
}
