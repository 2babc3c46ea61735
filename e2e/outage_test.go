package e2e_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/pgcluster"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// While the database is down, no webhook gets 200: each fails fast with 503
// (so the provider retries), and the service recovers by itself when the
// database returns. It needs a PostgreSQL of its own to stop.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	dir := pgtest.ServerDir(t, "outage-")
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })

	ctl := buildFulfillctl(t)
	cfg := testConfig(cluster.URL("fulfillment"))
	cfg.Database.Migrate = true
	// This test checks what the service does while it runs, not how it
	// stops.
	sink := &logSink{}
	a := runApp(t, cfg, slog.New(slog.NewJSONHandler(sink, nil)), true)
	s := &stack{ingestURL: "http://" + a.IngestAddr()}

	s.sendOK(t, event(yolfi.TypeInvoiceCreated, "outage-0", "inv_o0"))

	if err := cluster.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		start := time.Now()
		code := s.send(t, liveEP, liveSecret, event(yolfi.TypeInvoiceCreated, "outage-1", "inv_o1"))
		took := time.Since(start)
		if code != http.StatusServiceUnavailable {
			t.Errorf("request %d during the outage answered %d, want 503", i, code)
		}
		if took > 2500*time.Millisecond {
			t.Errorf("request %d during the outage took %v, want at most ~2s", i, took)
		}
	}

	time.Sleep(2 * time.Second) // the queues, listeners and liveness retry meanwhile
	// The outage is told once, plainly; the parts that ran into it say
	// nothing of their own at WARN.
	outage := sink.lines()
	var said []string
	for _, l := range outage {
		if strings.Contains(l, `"msg":"database unreachable`) {
			said = append(said, l)
		} else if strings.Contains(l, `"level":"WARN"`) {
			t.Errorf("during the outage, a warning besides the one line: %s", l)
		}
	}
	if len(said) != 1 || !strings.Contains(said[0], `"level":"ERROR"`) {
		t.Errorf("lines saying the database is unreachable: %q; want one, at ERROR", said)
	}

	// The API says so too, with when to try again (after the lines above:
	// a call that fails logs its own).
	req, err := http.NewRequest("GET", "http://"+a.HTTPAddr()+"/v1/orders", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := (&http.Client{Timeout: 40 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("REST during the outage: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	// fulfillctl, answered UNAVAILABLE by a running service, says that the
	// database is what does not answer, not to look for the service.
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(adminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, ctl, "--addr", a.GRPCAddr(), "--token-file", tokenFile, "recon", "summary")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.HasPrefix(stderr.String(), "fulfillctl: UNAVAILABLE: ") ||
		!strings.Contains(stderr.String(), "fulfillmentd answered, but its database does not") ||
		strings.Contains(stderr.String(), "check that fulfillmentd is running") {
		t.Errorf("fulfillctl recon summary during the outage: %v, stderr %q; want UNAVAILABLE saying the database does not answer", err, stderr.String())
	}

	if err := cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	s.sendUntilAcked(t, "the database back", event(yolfi.TypeInvoiceCreated, "outage-2", "inv_o2"), 5*time.Second)
	waitFor(t, "the log saying the database answers again", sink.said("database reachable again"))
}

// A database that hangs — it accepts connections and answers nothing, and
// nothing is reset — is told to a REST caller as it is to a gRPC one: the
// database is unavailable (503, Retry-After, DATABASE_UNAVAILABLE), after
// grpc.max_call_duration, with the WARN line that says so. The REST
// request's bound used to expire with the call's, and the gateway answered
// 504 "context deadline exceeded" before the call's own answer came back;
// the log said only that the call was cancelled.
func TestHungDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.DB(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newSilentProxy(t, u.Host)
	u.Host = proxy.addr()
	cfg := testConfig(u.String())
	const limit = 2 * time.Second
	cfg.GRPC.MaxCallDuration = limit
	sink := &logSink{}
	a := runApp(t, cfg, slog.New(slog.NewJSONHandler(sink, nil)), true)
	t.Cleanup(proxy.thaw)
	proxy.freeze()

	req, err := http.NewRequest("GET", "http://"+a.HTTPAddr()+"/v1/orders", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	start := time.Now()
	resp, err := (&http.Client{Timeout: 4 * limit}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), "DATABASE_UNAVAILABLE") {
		t.Errorf("REST with the database hung: %d, Retry-After %q, %s; want 503 with Retry-After and DATABASE_UNAVAILABLE",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if took > limit+1500*time.Millisecond {
		t.Errorf("REST with the database hung answered after %v; grpc.max_call_duration is %v", took, limit)
	}

	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+adminToken)
	_, err = fulfillmentv1.NewFulfillmentServiceClient(conn).ListOrders(ctx, &fulfillmentv1.ListOrdersRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC with the database hung: %v; want UNAVAILABLE", err)
	}

	var warned int
	for _, l := range sink.lines() {
		if strings.Contains(l, `"msg":"dependency unavailable"`) && strings.Contains(l, `"level":"WARN"`) {
			warned++
		}
	}
	if warned < 2 {
		t.Errorf("%d WARN lines say a call found its database unavailable, want one per call (2)", warned)
	}
}
