package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// TestIngestProcess runs the webhook gateway as a process of its own
// (fulfillmentd ingest) in front of a running service: a signed webhook it
// takes is processed once by the service however often it is delivered, a
// forged one never reaches it, and the gateway's /metrics counts its
// requests by route and names its build.
func TestIngestProcess(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	via := startIngestProcess(t, s, s.grpcAddr, 5*time.Second)
	order := s.createOrder(t, "live", "split-1")
	paid := event(yolfi.TypePaymentConfirmed, "split-1", "inv_split_1")
	for range 3 {
		via.sendOK(t, paid)
	}
	forged := event(yolfi.TypePaymentConfirmed, "split-1", "inv_split_forged")
	if code := via.send(t, liveEP, "not-the-secret-not-the-secret-00", forged); code != http.StatusUnauthorized {
		t.Errorf("forged webhook answered %d, want 401", code)
	}
	s.settle(t)

	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = $1", paid.ID); n != 1 {
		t.Errorf("%d inbox rows for a webhook delivered 3 times, want 1", n)
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = $1", forged.ID); n != 0 {
		t.Errorf("the forged webhook reached the service: %d inbox rows", n)
	}
	if e := s.effects(t, order.GetId()); e.Licenses != 2 || e.Credits != 1 || e.State != "fulfilled" {
		t.Errorf("after one payment delivered 3 times through the gateway process: %v, want 2 licenses, 1 credit, fulfilled", e)
	}

	m := scrape(t, via.ingestURL)
	webhookRoute := []string{"listener", "ingest", "route", "/webhooks/{endpoint_id}", "method", "post"}
	if got := m.value(t, "fulfillment_http_requests_total", append(webhookRoute, "code", "200")...); got != 3 {
		t.Errorf("gateway counted %v accepted webhook requests, want 3", got)
	}
	if got := m.value(t, "fulfillment_http_requests_total", append(webhookRoute, "code", "401")...); got != 1 {
		t.Errorf("gateway counted %v refused webhook requests, want 1", got)
	}
	if got := m.value(t, "fulfillment_build_info"); got != 1 {
		t.Errorf("fulfillment_build_info = %v, want 1", got)
	}
}
