package server_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/rig/testcert"
)

func TestHealthReadyOpenAPI(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)

	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200} {
		code, body := ts.do(t, "GET", path, "", nil)
		if code != want || body["status"] != "ok" {
			t.Errorf("%s = %d %v", path, code, body)
		}
	}

	resp, err := http.Get(ts.httpURL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/orders", "/v1/orders/{order_id}"} {
		if _, ok := doc.Paths[p]; !ok {
			t.Errorf("OpenAPI document lacks %s (has %v)", p, doc.Paths)
		}
	}

	// Request ids: the caller's is echoed, otherwise one is made.
	req, _ := http.NewRequest("GET", ts.httpURL+"/v1/orders", http.NoBody)
	req.Header.Set("X-Request-Id", "trace-abc-123")
	req.Header.Set("Authorization", "Bearer "+tokOps)
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = r2.Body.Close()
	if got := r2.Header.Values("X-Request-Id"); len(got) != 1 || got[0] != "trace-abc-123" {
		t.Errorf("X-Request-Id = %v, want [trace-abc-123]", got)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(ts.logs.String(), `"request_id":"trace-abc-123"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the request id is not in the log:\n%s", ts.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGRPCHealth(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	resp, err := healthpb.NewHealthClient(ts.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = %v, %v", resp, err)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := testcert.SelfSigned(t)
	ts := startServer(t, func(c *config.Config) {
		c.TLS = &config.TLS{CertFile: certFile, KeyFile: keyFile}
	})
	tlsCfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}

	// gRPC over TLS.
	conn, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	client := fulfillmentv1.NewFulfillmentServiceClient(conn)
	if _, err := client.CreateOrder(withToken(tokCheckout), orderRequest("org_a", "tls-1")); err != nil {
		t.Fatalf("CreateOrder over TLS: %v", err)
	}

	// REST over TLS, and plain HTTP is refused.
	httpsURL := "https://" + strings.TrimPrefix(ts.httpURL, "http://")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	req, _ := http.NewRequest("GET", httpsURL+"/v1/orders?org_id=org_a", http.NoBody)
	req.Header.Set("Authorization", "Bearer "+tokCheckout)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Orders []any }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || len(body.Orders) != 1 {
		t.Errorf("GET over TLS = %d, %d orders", resp.StatusCode, len(body.Orders))
	}
	if resp, err := http.Get(ts.httpURL + "/healthz"); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP served on a TLS listener")
		}
	}
}
