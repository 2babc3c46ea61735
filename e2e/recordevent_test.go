package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/server"
)

// recordRequest is a RecordEvent request as a gateway for liveEP sends it:
// a confirmed payment for merchantOrderID.
func recordRequest(merchantOrderID string) *fulfillmentv1.RecordEventRequest {
	return &fulfillmentv1.RecordEventRequest{
		Provider: "yolfi", EndpointId: liveEP, OrgId: orgA, Environment: "live",
		EventId: yolfi.NewID("evt_"), Type: yolfi.TypePaymentConfirmed, Kind: string(fulfillment.EventPaymentConfirmed),
		Payment: &fulfillmentv1.EventPayment{
			AttemptRef: "inv_" + merchantOrderID, InvoiceId: "inv_" + merchantOrderID, MerchantOrderId: merchantOrderID,
			Amount: "25.000000", Token: "USDT", Network: "TRON",
		},
		RawBody: []byte(`{"forged":true}`),
	}
}

// Only a webhook gateway records events: an admin token cannot fulfil an
// order with a forged, unsigned payment.
func TestAdminCannotRecordEvents(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	order := s.createOrder(t, "live", "forged-1")
	for _, token := range []string{adminToken, orgAToken} {
		_, err := s.client.RecordEvent(authed(token), recordRequest("forged-1"))
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("RecordEvent with a non-ingest token: %v, want PermissionDenied", err)
		}
	}
	// The gateway's own token works, so the refusal above is the scope's.
	if _, err := s.client.RecordEvent(authed(ingestToken), recordRequest("forged-ok")); err != nil {
		t.Fatalf("RecordEvent with the ingest token: %v", err)
	}
	s.settle(t)
	if got := s.effects(t, order.GetId()); got.State != "pending_payment" || got.Licenses != 0 || got.Credits != 0 {
		t.Errorf("forged payments changed the order: %v", got)
	}
}

// RecordEvent takes an event only for a configured endpoint, as that
// endpoint is configured (else FAILED_PRECONDITION: the gateway's
// configuration and the service's disagree), with every field within the
// adapters' rules (else INVALID_ARGUMENT) — and nothing refused reaches SQL.
func TestRecordEventRefusesWhatNoAdapterSends(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	cases := []struct {
		name   string
		mutate func(*fulfillmentv1.RecordEventRequest)
		field  string
		code   codes.Code // 0: InvalidArgument
	}{
		{"unconfigured endpoint", func(r *fulfillmentv1.RecordEventRequest) { r.EndpointId = "yolfi-other" }, "endpoint_id", codes.FailedPrecondition},
		{"another org than the endpoint's", func(r *fulfillmentv1.RecordEventRequest) { r.OrgId = "org_b" }, "org_id", codes.FailedPrecondition},
		{"another environment", func(r *fulfillmentv1.RecordEventRequest) { r.Environment = "test" }, "environment", codes.FailedPrecondition},
		{"another provider", func(r *fulfillmentv1.RecordEventRequest) { r.Provider = "tbank" }, "provider", codes.FailedPrecondition},
		{"exponent amount", func(r *fulfillmentv1.RecordEventRequest) { r.Payment.Amount = "1e30" }, "payment.amount", 0},
		{"negative amount", func(r *fulfillmentv1.RecordEventRequest) { r.Payment.Amount = "-25" }, "payment.amount", 0},
		{"too many digits", func(r *fulfillmentv1.RecordEventRequest) { r.Payment.Amount = "123456789012345678901.5" }, "payment.amount", 0},
		{"too many decimals", func(r *fulfillmentv1.RecordEventRequest) { r.Payment.Amount = "1." + strings.Repeat("1", 19) }, "payment.amount", 0},
		{"NUL in merchant order id", func(r *fulfillmentv1.RecordEventRequest) { r.Payment.MerchantOrderId = "m\x00" }, "payment.merchant_order_id", 0},
		// (Invalid UTF-8 cannot travel in a proto3 string: gRPC refuses to
		// encode or decode it before any handler runs.)
		{"NUL in event id", func(r *fulfillmentv1.RecordEventRequest) { r.EventId = "evt_\x00" }, "event_id", 0},
		{"over-long reference", func(r *fulfillmentv1.RecordEventRequest) { r.Payment.PaymentId = strings.Repeat("p", 129) }, "payment.payment_id", 0},
		{"over-long type", func(r *fulfillmentv1.RecordEventRequest) { r.Type = strings.Repeat("t", 65) }, "type", 0},
		{"space in token", func(r *fulfillmentv1.RecordEventRequest) { r.Payment.Token = "US DT" }, "payment.token", 0},
		{"a fraction of a kopeck", func(r *fulfillmentv1.RecordEventRequest) {
			r.Payment.Amount, r.Payment.Token, r.Payment.Network, r.Payment.Currency = "2500.5", "", "", "RUB"
		}, "payment.amount", 0},
		{"an amount without its unit", func(r *fulfillmentv1.RecordEventRequest) {
			r.Kind, r.Type, r.Payment.Token, r.Payment.Network = string(fulfillment.EventAttemptCreated), "invoice.created", "", ""
		}, "payment.currency", 0},
		{"NUL in a provider reference", func(r *fulfillmentv1.RecordEventRequest) { r.Refs = map[string]string{"tx_hash": "0x\x00"} }, "refs.tx_hash", 0},
		{"attempt ref of another attempt", func(r *fulfillmentv1.RecordEventRequest) { r.Payment.AttemptRef = "inv_other" }, "payment.attempt_ref", 0},
		{"confirmed without an amount", func(r *fulfillmentv1.RecordEventRequest) { r.Payment.Amount = "" }, "payment.amount", 0},
		{"confirmed naming no order", func(r *fulfillmentv1.RecordEventRequest) {
			r.Payment.MerchantOrderId, r.Payment.InvoiceId, r.Payment.AttemptRef = "", "", ""
		}, "payment", 0},
		{"unknown kind", func(r *fulfillmentv1.RecordEventRequest) { r.Kind = "refund" }, "kind", 0},
		{"no raw body", func(r *fulfillmentv1.RecordEventRequest) { r.RawBody = nil }, "raw_body", 0},
	}
	for _, tc := range cases {
		req := recordRequest("bad-1")
		tc.mutate(req)
		_, err := s.client.RecordEvent(authed(ingestToken), req)
		st, want := status.Convert(err), tc.code
		if want == 0 {
			want = codes.InvalidArgument
		}
		if st.Code() != want || !strings.Contains(st.Message(), tc.field+":") {
			t.Errorf("%s: %v, want %s naming %s", tc.name, err, want, tc.field)
		}
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events"); n != 0 {
		t.Errorf("refused events stored %d rows", n)
	}
}

// A gateway's token limited to one org learns nothing of another org's
// endpoints: an event for org_b's endpoint, sent with org_b, is refused for
// the org (PERMISSION_DENIED), and sent with its own org, it is answered as
// one for an endpoint that is not configured — the same words as for a
// name no endpoint has — where it was told the endpoint's org
// ("org_id: endpoint ... is configured with org_id ...").
func TestOrgLimitedGatewayLearnsNoOtherOrgsEndpoint(t *testing.T) {
	t.Parallel()
	const edgeA = "tok-ingest-org-a-0123456789"
	s := startReplicaWith(t, pgtest.DB(t), func(c *config.Config) {
		c.Auth.Tokens = append(c.Auth.Tokens, config.Token{Name: "edge-a", Secret: edgeA, Scopes: []string{config.ScopeIngest}, Orgs: []string{orgA}})
		c.Endpoints = append(c.Endpoints, config.Endpoint{ID: "yolfi-b", Provider: "yolfi", Org: orgB, Environment: "live",
			Secrets: []config.Secret{{Value: []byte(liveSecret)}}})
	})
	unknown := func(id string) string {
		return fmt.Sprintf("endpoint_id: %q is not a webhook endpoint of this service's configuration (endpoints[].id)", id)
	}
	for _, c := range []struct {
		name     string
		endpoint string
		org      string
		code     codes.Code
		msg      string
	}{
		{"org_b's endpoint, org_b", "yolfi-b", orgB, codes.PermissionDenied, fmt.Sprintf("token %q may not act for org %q", "edge-a", orgB)},
		{"org_b's endpoint, its own org", "yolfi-b", orgA, codes.FailedPrecondition, unknown("yolfi-b")},
		{"no such endpoint", "yolfi-nowhere", orgA, codes.FailedPrecondition, unknown("yolfi-nowhere")},
	} {
		req := recordRequest("probe-1")
		req.EndpointId, req.OrgId = c.endpoint, c.org
		_, err := s.client.RecordEvent(authed(edgeA), req)
		if st := status.Convert(err); st.Code() != c.code || st.Message() != c.msg {
			t.Errorf("%s: %v; want %s %q", c.name, err, c.code, c.msg)
		}
	}
	// The every-org gateway is still told what is wrong with org_b's.
	req := recordRequest("probe-2")
	req.EndpointId = "yolfi-b"
	_, err := s.client.RecordEvent(authed(ingestToken), req)
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "org_id: endpoint \"yolfi-b\" is configured with") {
		t.Errorf("the every-org gateway, org_b's endpoint with org_a: %v", err)
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events"); n != 0 {
		t.Errorf("refused events stored %d rows", n)
	}
}

// A gateway in another process maps the service's answers: a refused event
// is a 4xx (the provider stops retrying it), only an unavailable service is
// a 503, and a refused gateway is neither a refusal of the event nor
// "unavailable".
func TestRecorderMapsCodes(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ev := fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderYolfi, EndpointID: liveEP, OrgID: orgA, Environment: fulfillment.EnvLive,
		EventID: yolfi.NewID("evt_"), Type: yolfi.TypeInvoiceCreated, Kind: fulfillment.EventAttemptCreated,
		Payment: fulfillment.PaymentInfo{AttemptRef: "inv_r", InvoiceID: "inv_r", MerchantOrderID: "r-1"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := server.NewEventRecorder(conn, ingestToken).RecordEvent(ctx, ev, []byte(`{}`)); err != nil {
		t.Fatalf("a valid event: %v", err)
	}
	bad := ev
	bad.Payment.Amount = fulfillment.TokenAmount(decimal.New(-1, 0), "USDT", "TRON")
	_, err = server.NewEventRecorder(conn, ingestToken).RecordEvent(ctx, bad, []byte(`{}`))
	var ve *fulfillment.ValidationError
	if !errors.As(err, &ve) {
		t.Errorf("a malformed event: %v, want a validation error (400)", err)
	}
	unknown := ev
	unknown.EndpointID = "nope"
	_, err = server.NewEventRecorder(conn, ingestToken).RecordEvent(ctx, unknown, []byte(`{}`))
	if err == nil || errors.As(err, &ve) || errors.Is(err, fulfillment.ErrUnavailable) {
		t.Errorf("an endpoint this service lacks: %v, want a plain error (500: configurations disagree)", err)
	}
	_, err = server.NewEventRecorder(conn, adminToken).RecordEvent(ctx, ev, []byte(`{}`))
	if err == nil || errors.As(err, &ve) || errors.Is(err, fulfillment.ErrUnavailable) {
		t.Errorf("a refused gateway token: %v, want a plain error (500)", err)
	}
}

// A provider date before 2000 or more than a day ahead cannot make an event
// newer than the ones received around it: it is recorded at receipt.
func TestAbsurdOccurrenceTimeIsNotBelieved(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	for _, tc := range []struct {
		name    string
		at      time.Time
		believe bool
	}{
		{"far future", time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{"before 2000", time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC), false},
		{"an hour ahead", time.Now().Add(time.Hour), true},
		{"last year", time.Now().AddDate(-1, 0, 0), true},
	} {
		req := recordRequest("when-1")
		req.OccurTime = timestamppb.New(tc.at)
		if _, err := s.client.RecordEvent(authed(ingestToken), req); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var occurred, received time.Time
		if err := s.db.QueryRow(context.Background(), "SELECT occurred_at, received_at FROM inbox_events WHERE event_id = $1",
			req.GetEventId()).Scan(&occurred, &received); err != nil {
			t.Fatal(err)
		}
		want := received
		if tc.believe {
			want = tc.at
		}
		if d := occurred.Sub(want); d < -time.Minute || d > time.Minute {
			t.Errorf("%s: recorded as occurred at %v, want about %v", tc.name, occurred, want)
		}
	}
}

// X-Yolfi-Event-ID is an unsigned copy of the body's id, which Yolfi may
// leave out: a delivery without it is stored; one whose header names
// another id is refused; the signed id deduplicates them all.
func TestMissingEventIDHeader(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	p := event(yolfi.TypeInvoiceCreated, "hdr-1", "inv_hdr")
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if code := s.sendRaw(t, liveEP, liveSecret, body, ""); code != http.StatusOK {
		t.Errorf("delivery without %s: %d, want 200", yolfi.EventIDHeader, code)
	}
	if code := s.sendRaw(t, liveEP, liveSecret, body, "evt_another"); code != http.StatusBadRequest {
		t.Errorf("the delivery with a header naming another id: %d, want 400", code)
	}
	if code := s.sendRaw(t, liveEP, liveSecret, body, p.ID); code != http.StatusOK {
		t.Errorf("the same delivery with the header: %d, want 200", code)
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events"); n != 1 {
		t.Errorf("%d events stored, want 1", n)
	}
}
