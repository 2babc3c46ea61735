package server_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// Tokens of the reconciliation tests.
const (
	tokReconA     = "tok-recon-a-0123456789"      // reconciliation:read + write, org_a
	tokReconARead = "tok-recon-a-read-0123456789" // reconciliation:read, org_a
	tokReconB     = "tok-recon-b-0123456789"      // reconciliation:read + write, org_b
	tokAdminA     = "tok-admin-a-0123456789"      // admin, org_a
)

func withReconTokens(c *config.Config) {
	rw := []string{config.ScopeReconciliationRead, config.ScopeReconciliationWrite}
	c.Auth.Tokens = append(c.Auth.Tokens,
		config.Token{Name: "recon-a", Secret: tokReconA, Scopes: rw, Orgs: []string{"org_a"}},
		config.Token{Name: "recon-a-read", Secret: tokReconARead, Scopes: []string{config.ScopeReconciliationRead}, Orgs: []string{"org_a"}},
		config.Token{Name: "recon-b", Secret: tokReconB, Scopes: rw, Orgs: []string{"org_b"}},
		config.Token{Name: "admin-a", Secret: tokAdminA, Scopes: []string{config.ScopeAdmin}, Orgs: []string{"org_a"}},
	)
}

// paymentEvent is a Yolfi confirmation of org's merchantID.
func paymentEvent(org, id, merchantID string) fulfillment.ProviderEvent {
	return fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderYolfi, EndpointID: "yolfi-" + strings.ReplaceAll(org, "_", "-"), OrgID: org,
		Environment: fulfillment.EnvLive, EventID: id, Type: "payment.confirmed", Kind: fulfillment.EventPaymentConfirmed,
		Payment: fulfillment.PaymentInfo{
			AttemptRef: "inv_" + id, InvoiceID: "inv_" + id, PaymentID: "pay_" + id, MerchantOrderID: merchantID,
			Amount: fulfillment.TokenAmount(decimal.RequireFromString("27"), "USDT", "TRON"),
		},
	}
}

// reconFixture is a server with, in org_a, an order paid twice (an
// extra_payment item) and an unmatched payment; in org_b, an unmatched
// payment. It returns the stored events' ids by event id.
func reconFixture(t *testing.T) (*testServer, *storage.Store, map[string]string) {
	t.Helper()
	ts := startServer(t, withReconTokens)
	store, err := storage.Open(context.Background(), ts.db, storage.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	if _, err := ts.client.CreateOrder(withToken(tokCheckout), orderRequest("org_a", "m-1")); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, ev := range []fulfillment.ProviderEvent{
		paymentEvent("org_a", "evt_paid", "m-1"), paymentEvent("org_a", "evt_extra", "m-1"),
		paymentEvent("org_a", "evt_stray", "nobody"), paymentEvent("org_b", "evt_b", "nobody"),
	} {
		r, err := store.InboxInsert(context.Background(), ev, []byte(`{"id":"`+ev.EventID+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		ids[ev.EventID] = fmt.Sprint(r.ID)
	}
	processInbox(t, store, 4)
	return ts, store, ids
}

// processInbox decides every pending event, as the inbox worker does.
func processInbox(t *testing.T, store *storage.Store, want int) {
	t.Helper()
	ctx := context.Background()
	claims, err := store.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "test-worker", Limit: 100, Lease: time.Minute, MaxAttempts: 10})
	if err != nil || len(claims) != want {
		t.Fatalf("claimed %d events (%v), want %d", len(claims), err, want)
	}
	var ids []int64
	for _, c := range claims {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	if _, err := store.InboxProcess(ctx, ids, "test-worker"); err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), msg) {
		t.Errorf("%s: %v, want %v containing %q", what, err, code, msg)
	}
}

// wantHidden checks that err answers an object of another org as a
// missing one: NOT_FOUND, with the message an unknown id gets (msg), and
// nothing naming the org.
func wantHidden(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if status.Code(err) != codes.NotFound || status.Convert(err).Message() != msg {
		t.Errorf("%s: %v, want NOT_FOUND %q, as an unknown id", what, err, msg)
	}
}

func itemsOf(t *testing.T, token string, req *fulfillmentv1.ListReconciliationItemsRequest, ts *testServer) []*fulfillmentv1.ReconciliationItem {
	t.Helper()
	resp, err := ts.client.ListReconciliationItems(withToken(token), req)
	if err != nil {
		t.Fatalf("ListReconciliationItems(%v): %v", req, err)
	}
	return resp.GetItems()
}

// Summary, list, get with evidence and resolve, each with its scope and
// only for the caller's orgs.
func TestReconciliationAPI(t *testing.T) {
	t.Parallel()
	ts, _, events := reconFixture(t)

	// Summary: org_a's token sees org_a only; the all-orgs admin both.
	sum, err := ts.client.GetReconciliationSummary(withToken(tokReconA), &fulfillmentv1.GetReconciliationSummaryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s := sum.GetSummaries(); len(s) != 1 || s[0].GetOrgId() != "org_a" || s[0].GetOpenItems() != 2 ||
		len(s[0].GetOpenByKind()) != 2 || s[0].GetOpenByKind()[0].GetKind() != "unmatched_payment" ||
		s[0].GetOpenByKind()[1].GetKind() != "extra_payment" || s[0].GetOldestOpenAge() == nil || sum.GetCheckTime() == nil {
		t.Errorf("org_a's summary: %v", sum)
	}
	sum, err = ts.client.GetReconciliationSummary(withToken(tokOps), &fulfillmentv1.GetReconciliationSummaryRequest{})
	if err != nil || len(sum.GetSummaries()) != 2 || sum.GetSummaries()[1].GetOrgId() != "org_b" || sum.GetSummaries()[1].GetOpenItems() != 1 {
		t.Errorf("every org's summary: %v, %v", sum, err)
	}
	_, err = ts.client.GetReconciliationSummary(withToken(tokReconA), &fulfillmentv1.GetReconciliationSummaryRequest{OrgId: "org_b"})
	wantCode(t, "org_a's token asking org_b's summary", err, codes.PermissionDenied, `may not act for org "org_b"`)
	_, err = ts.client.GetReconciliationSummary(withToken(tokCheckout), &fulfillmentv1.GetReconciliationSummaryRequest{})
	wantCode(t, "summary without the scope", err, codes.PermissionDenied, `lacks the "reconciliation:read" scope`)
	code, body := ts.do(t, http.MethodGet, "/v1/reconciliation/summary?environment=live", tokReconB, nil)
	if s, _ := body["summaries"].([]any); code != http.StatusOK || len(s) != 1 || s[0].(map[string]any)["org_id"] != "org_b" {
		t.Errorf("REST summary of org_b: %d %v", code, body)
	}

	// Activity: per minute, every minute present, the caller's orgs only.
	act, err := ts.client.GetActivity(withToken(tokReconA), &fulfillmentv1.GetActivityRequest{})
	if err != nil || len(act.GetMinutes()) != 61 {
		t.Fatalf("org_a's activity: %v, %v; want 61 minutes", act, err)
	}
	sumOf := func(a *fulfillmentv1.GetActivityResponse) (ev, ful, del int64) {
		for _, m := range a.GetMinutes() {
			ev, ful, del = ev+m.GetEventsReceived(), ful+m.GetOrdersFulfilled(), del+m.GetMessagesDelivered()
		}
		return ev, ful, del
	}
	last := act.GetMinutes()[60].GetStartTime().AsTime()
	if ev, ful, del := sumOf(act); ev != 3 || ful != 1 || del != 0 || act.GetCheckTime().AsTime().Sub(last) >= time.Minute || act.GetCheckTime().AsTime().Before(last) {
		t.Errorf("org_a's activity: %d events, %d fulfilled, %d delivered, last minute %v at %v; want 3, 1, 0, the current minute",
			ev, ful, del, last, act.GetCheckTime().AsTime())
	}
	// A minute that ended is counted once and kept: an event moved into one
	// afterwards is not counted again (rows are stamped when written, so
	// this happens only by hand), while the current minute is counted anew.
	ts.exec(t, `UPDATE inbox_events SET received_at = now() - interval '10 minutes' WHERE event_id = 'evt_stray'`)
	// (A window of 59 minutes: the same answer is reused for 5 s.)
	act, err = ts.client.GetActivity(withToken(tokReconA), &fulfillmentv1.GetActivityRequest{Minutes: 59})
	if ev, _, _ := sumOf(act); err != nil || ev != 2 {
		t.Errorf("org_a's activity after an event moved into a counted minute: %d events, %v; want 2", ev, err)
	}
	act, err = ts.client.GetActivity(withToken(tokOps), &fulfillmentv1.GetActivityRequest{Minutes: 5, Environment: "live"})
	if ev, _, _ := sumOf(act); err != nil || len(act.GetMinutes()) != 6 || ev != 3 {
		t.Errorf("every org's activity over 5 minutes: %d events, %v; want 6 minutes, 3 events (evt_stray is 10 minutes old)", ev, err)
	}
	_, err = ts.client.GetActivity(withToken(tokReconA), &fulfillmentv1.GetActivityRequest{OrgId: "org_b"})
	wantCode(t, "org_a's token asking org_b's activity", err, codes.PermissionDenied, `may not act for org "org_b"`)
	_, err = ts.client.GetActivity(withToken(tokOps), &fulfillmentv1.GetActivityRequest{Minutes: 181})
	wantCode(t, "a window too long", err, codes.InvalidArgument, "minutes: must be between 1 and 180")
	_, err = ts.client.GetActivity(withToken(tokCheckout), &fulfillmentv1.GetActivityRequest{})
	wantCode(t, "activity without the scope", err, codes.PermissionDenied, `lacks the "reconciliation:read" scope`)
	if code, body := ts.do(t, http.MethodGet, "/v1/activity?minutes=2", tokReconB, nil); code != http.StatusOK || len(body["minutes"].([]any)) != 3 {
		t.Errorf("REST activity of org_b: %d %v", code, body)
	}

	// List: filters, and the caller's orgs only.
	if got := itemsOf(t, tokReconA, &fulfillmentv1.ListReconciliationItemsRequest{}, ts); len(got) != 2 || got[0].GetOrgId() != "org_a" || got[1].GetOrgId() != "org_a" {
		t.Errorf("org_a's items: %v", got)
	}
	if got := itemsOf(t, tokReconB, &fulfillmentv1.ListReconciliationItemsRequest{}, ts); len(got) != 1 || got[0].GetEventId() != "evt_b" {
		t.Errorf("org_b's items: %v", got)
	}
	extra := itemsOf(t, tokReconA, &fulfillmentv1.ListReconciliationItemsRequest{Kind: "extra_payment", Environment: "live"}, ts)
	if len(extra) != 1 || extra[0].GetInboxEventId() != events["evt_extra"] || extra[0].GetOrderId() == "" {
		t.Fatalf("extra_payment items: %v", extra)
	}
	hour := time.Now().Add(time.Hour)
	if got := itemsOf(t, tokReconA, &fulfillmentv1.ListReconciliationItemsRequest{CreateTimeFrom: timestamppb.New(hour)}, ts); len(got) != 0 {
		t.Errorf("items opened from an hour on: %v", got)
	}
	if got := itemsOf(t, tokReconA, &fulfillmentv1.ListReconciliationItemsRequest{CreateTimeBefore: timestamppb.New(hour), Environment: "test"}, ts); len(got) != 0 {
		t.Errorf("test items: %v", got)
	}
	q := url.Values{"create_time_from": {time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}, "create_time_before": {hour.UTC().Format(time.RFC3339)}}
	code, body = ts.do(t, http.MethodGet, "/v1/reconciliation/items?"+q.Encode(), tokReconA, nil)
	if items, _ := body["items"].([]any); code != http.StatusOK || len(items) != 2 {
		t.Errorf("REST list by time range: %d %v", code, body)
	}
	_, err = ts.client.ListReconciliationItems(withToken(tokReconA), &fulfillmentv1.ListReconciliationItemsRequest{OrgId: "org_b"})
	wantCode(t, "org_a's token listing org_b", err, codes.PermissionDenied, "org_b")
	_, err = ts.client.ListReconciliationItems(withToken(tokReconA), &fulfillmentv1.ListReconciliationItemsRequest{
		CreateTimeFrom: timestamppb.New(hour), CreateTimeBefore: timestamppb.New(hour.Add(-2 * time.Hour))})
	wantCode(t, "an empty time range", err, codes.InvalidArgument, "create_time_before")
	orgB := itemsOf(t, tokReconB, &fulfillmentv1.ListReconciliationItemsRequest{}, ts)[0]

	// Get: the item with its evidence; another org's is denied.
	got, err := ts.client.GetReconciliationItem(withToken(tokReconA), &fulfillmentv1.GetReconciliationItemRequest{ItemId: extra[0].GetId()})
	if err != nil {
		t.Fatal(err)
	}
	ev := got.GetEvidence()
	if got.GetItem().GetKind() != "extra_payment" || ev.GetOrder().GetId() != extra[0].GetOrderId() ||
		ev.GetOrder().GetState() != "fulfilled" || len(ev.GetOrder().GetHistory().GetEvents()) != 2 ||
		len(ev.GetOrder().GetHistory().GetPaymentAttempts()) != 2 ||
		ev.GetEvent().GetEventId() != "evt_extra" || ev.GetEvent().GetDecision() != "duplicate_payment" ||
		ev.GetEvent().GetPayment().GetAmount() != "27" || ev.GetEvent().GetRawBody() != nil || ev.GetEvent().GetRawBodyStatus() != "" ||
		ev.GetDelivery() != nil || ev.GetSubscription() != nil || ev.GetPaymentStart() != nil {
		t.Errorf("the extra_payment item with its evidence: %v", got)
	}
	// License keys are secrets of orders:read: a reconciliation token sees
	// that the order's licenses exist, not their keys; the org's admin sees
	// them.
	ents := ev.GetOrder().GetHistory().GetEntitlements()
	if len(ents) == 0 {
		t.Fatal("the extra_payment item's order has no licenses to check")
	}
	for _, e := range ents {
		if e.GetValue() != "" {
			t.Errorf("a reconciliation token without orders:read sees the license key of unit %d", e.GetUnit())
		}
	}
	asAdmin, err := ts.client.GetReconciliationItem(withToken(tokAdminA), &fulfillmentv1.GetReconciliationItemRequest{ItemId: extra[0].GetId()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range asAdmin.GetEvidence().GetOrder().GetHistory().GetEntitlements() {
		if e.GetValue() == "" {
			t.Errorf("the org's admin does not see the license key of unit %d", e.GetUnit())
		}
	}
	_, err = ts.client.GetReconciliationItem(withToken(tokReconA), &fulfillmentv1.GetReconciliationItemRequest{ItemId: orgB.GetId()})
	wantHidden(t, "org_a's token reading org_b's item", err, "not found: reconciliation item "+orgB.GetId())
	_, err = ts.client.GetReconciliationItem(withToken(tokReconA), &fulfillmentv1.GetReconciliationItemRequest{ItemId: "999999"})
	wantCode(t, "an unknown item", err, codes.NotFound, "reconciliation item 999999")
	_, err = ts.client.GetReconciliationItem(withToken(tokReconA), &fulfillmentv1.GetReconciliationItemRequest{ItemId: "x"})
	wantCode(t, "a malformed id", err, codes.InvalidArgument, "item_id")
	code, body = ts.do(t, http.MethodGet, "/v1/reconciliation/items/"+orgB.GetId(), tokReconB, nil)
	if code != http.StatusOK || body["evidence"].(map[string]any)["event"].(map[string]any)["event_id"] != "evt_b" {
		t.Errorf("REST get: %d %v", code, body)
	}

	// Resolve: the write scope, the caller's org, once.
	resolve := &fulfillmentv1.ResolveReconciliationItemRequest{ItemId: extra[0].GetId(), Resolution: "refunded",
		Note: "refunded the second payment at Yolfi", ActorDetail: "Dana, ticket 4411"}
	_, err = ts.client.ResolveReconciliationItem(withToken(tokReconARead), resolve)
	wantCode(t, "resolving without the write scope", err, codes.PermissionDenied, `lacks the "reconciliation:write" scope`)
	_, err = ts.client.ResolveReconciliationItem(withToken(tokReconA), &fulfillmentv1.ResolveReconciliationItemRequest{
		ItemId: orgB.GetId(), Resolution: "no_action", Note: "not mine"})
	wantHidden(t, "org_a's token resolving org_b's item", err, "not found: reconciliation item "+orgB.GetId())
	_, err = ts.client.ResolveReconciliationItem(withToken(tokReconA), &fulfillmentv1.ResolveReconciliationItemRequest{ItemId: extra[0].GetId(), Resolution: "fixed"})
	wantCode(t, "an unknown resolution, no note", err, codes.InvalidArgument, "resolution: must be one of")
	if st := status.Convert(err); len(st.Details()) != 1 {
		t.Errorf("violations: %v", st.Details())
	}
	res, err := ts.client.ResolveReconciliationItem(withToken(tokReconA), resolve)
	if err != nil {
		t.Fatal(err)
	}
	it := res.GetItem()
	if it.GetState() != "resolved" || it.GetResolution() != "refunded" || it.GetResolvedBy() != "recon-a" ||
		it.GetResolvedByDetail() != "Dana, ticket 4411" || it.GetResolutionNote() != resolve.GetNote() || it.GetResolveTime() == nil {
		t.Errorf("resolved item: %v", it)
	}
	_, err = ts.client.ResolveReconciliationItem(withToken(tokOps), &fulfillmentv1.ResolveReconciliationItemRequest{
		ItemId: extra[0].GetId(), Resolution: "no_action", Note: "again"})
	wantCode(t, "resolving twice", err, codes.FailedPrecondition,
		"reconciliation item "+extra[0].GetId()+" was resolved as refunded at "+it.GetResolveTime().AsTime().UTC().Format(time.RFC3339)+" by recon-a; its resolution is kept")
	again, err := ts.client.GetReconciliationItem(withToken(tokReconA), &fulfillmentv1.GetReconciliationItemRequest{ItemId: extra[0].GetId()})
	if err != nil || again.GetItem().GetResolution() != "refunded" || again.GetItem().GetResolvedBy() != "recon-a" || again.GetEvidence().GetEvent() == nil {
		t.Errorf("after the second resolution: %v, %v", again, err)
	}
	if got := itemsOf(t, tokReconB, &fulfillmentv1.ListReconciliationItemsRequest{State: "open"}, ts); len(got) != 1 {
		t.Errorf("org_b's item no longer open: %v", got)
	}
	// Over REST: the resolver cannot be named in the request.
	code, body = ts.do(t, http.MethodPost, "/v1/reconciliation/items/"+orgB.GetId()+":resolve", tokReconB,
		map[string]any{"resolution": "no_action", "note": "test traffic", "resolved_by": "someone else"})
	if code != http.StatusBadRequest {
		t.Errorf("REST resolve naming the resolver: %d %v", code, body)
	}
	code, body = ts.do(t, http.MethodPost, "/v1/reconciliation/items/"+orgB.GetId()+":resolve", tokReconB,
		map[string]any{"resolution": "no_action", "note": "test traffic"})
	if item, _ := body["item"].(map[string]any); code != http.StatusOK || item["resolved_by"] != "recon-b" || item["state"] != "resolved" {
		t.Errorf("REST resolve: %d %v", code, body)
	}
	code, body = ts.do(t, http.MethodPost, "/v1/reconciliation/items/"+orgB.GetId()+":resolve", tokReconB,
		map[string]any{"resolution": "no_action", "note": "test traffic"})
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["message"]), "by recon-b") {
		t.Errorf("REST resolve twice: %d %v", code, body)
	}
	_, err = ts.client.ListReconciliationItems(context.Background(), &fulfillmentv1.ListReconciliationItemsRequest{})
	wantCode(t, "no token", err, codes.Unauthenticated, "")
}

// Events: admin only; an org-limited admin sees its orgs' events only; the
// raw body to admins; replay re-decides through the processor, once at a
// time.
func TestInboxEventsAPI(t *testing.T) {
	t.Parallel()
	ts, store, events := reconFixture(t)

	_, err := ts.client.ListInboxEvents(withToken(tokReconA), &fulfillmentv1.ListInboxEventsRequest{})
	wantCode(t, "events with a reconciliation token", err, codes.PermissionDenied, `lacks the "admin" scope`)
	_, err = ts.client.GetInboxEvent(withToken(tokReconA), &fulfillmentv1.GetInboxEventRequest{InboxEventId: events["evt_paid"]})
	wantCode(t, "an event with a reconciliation token", err, codes.PermissionDenied, `lacks the "admin" scope`)

	list, err := ts.client.ListInboxEvents(withToken(tokOps), &fulfillmentv1.ListInboxEventsRequest{})
	if err != nil || len(list.GetEvents()) != 4 || list.GetEvents()[0].GetEventId() != "evt_b" || list.GetEvents()[3].GetEventId() != "evt_paid" {
		t.Fatalf("every event, newest first: %v, %v", list, err)
	}
	for _, e := range list.GetEvents() {
		if e.GetRawBody() != nil || e.GetRawBodyStatus() != "" {
			t.Errorf("a listing shows a body: %v", e)
		}
	}
	list, err = ts.client.ListInboxEvents(withToken(tokAdminA), &fulfillmentv1.ListInboxEventsRequest{})
	if err != nil || len(list.GetEvents()) != 3 || slices.ContainsFunc(list.GetEvents(), func(e *fulfillmentv1.InboxEvent) bool { return e.GetOrgId() != "org_a" }) {
		t.Errorf("org_a's admin lists: %v, %v", list, err)
	}
	for _, c := range []struct {
		req  *fulfillmentv1.ListInboxEventsRequest
		want []string
	}{
		{&fulfillmentv1.ListInboxEventsRequest{State: "unmatched"}, []string{"evt_b", "evt_stray"}},
		{&fulfillmentv1.ListInboxEventsRequest{Decision: "duplicate_payment"}, []string{"evt_extra"}},
		{&fulfillmentv1.ListInboxEventsRequest{Type: "payment.confirmed", OrgId: "org_b"}, []string{"evt_b"}},
		{&fulfillmentv1.ListInboxEventsRequest{EndpointId: "yolfi-org-a", State: "processed"}, []string{"evt_extra", "evt_paid"}},
	} {
		resp, err := ts.client.ListInboxEvents(withToken(tokOps), c.req)
		var got []string
		for _, e := range resp.GetEvents() {
			got = append(got, e.GetEventId())
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ListInboxEvents(%v) = %v, %v; want %v", c.req, got, err, c.want)
		}
	}
	// By environment: evt_stray in test for a moment.
	ts.exec(t, `UPDATE inbox_events SET environment = 'test' WHERE event_id = 'evt_stray'`)
	for env, want := range map[string][]string{"test": {"evt_stray"}, "live": {"evt_b", "evt_extra", "evt_paid"}} {
		resp, err := ts.client.ListInboxEvents(withToken(tokOps), &fulfillmentv1.ListInboxEventsRequest{Environment: env})
		var got []string
		for _, e := range resp.GetEvents() {
			got = append(got, e.GetEventId())
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("events of environment %s = %v, %v; want %v", env, got, err, want)
		}
	}
	if code, body := ts.do(t, http.MethodGet, "/v1/events?environment=test", tokOps, nil); code != http.StatusOK || len(body["events"].([]any)) != 1 {
		t.Errorf("REST events of environment test: %d %v, want evt_stray", code, body)
	}
	_, err = ts.client.ListInboxEvents(withToken(tokOps), &fulfillmentv1.ListInboxEventsRequest{Environment: "prod"})
	wantCode(t, "an unknown environment", err, codes.InvalidArgument, `environment: must be "live" or "test"`)
	ts.exec(t, `UPDATE inbox_events SET environment = 'live' WHERE event_id = 'evt_stray'`)
	// By provider and by when they were received: evt_stray an hour ago.
	ts.exec(t, `UPDATE inbox_events SET received_at = now() - interval '1 hour' WHERE event_id = 'evt_stray'`)
	halfHourAgo := timestamppb.New(time.Now().Add(-30 * time.Minute))
	for _, c := range []struct {
		req  *fulfillmentv1.ListInboxEventsRequest
		want []string
	}{
		{&fulfillmentv1.ListInboxEventsRequest{Provider: "yolfi"}, []string{"evt_b", "evt_stray", "evt_extra", "evt_paid"}},
		{&fulfillmentv1.ListInboxEventsRequest{Provider: "tbank"}, nil},
		{&fulfillmentv1.ListInboxEventsRequest{ReceivedBefore: halfHourAgo}, []string{"evt_stray"}},
		{&fulfillmentv1.ListInboxEventsRequest{ReceivedAfter: halfHourAgo, OrgId: "org_a"}, []string{"evt_extra", "evt_paid"}},
		{&fulfillmentv1.ListInboxEventsRequest{ReceivedAfter: timestamppb.New(time.Now().Add(-2 * time.Hour)), ReceivedBefore: halfHourAgo, Provider: "yolfi"}, []string{"evt_stray"}},
	} {
		resp, err := ts.client.ListInboxEvents(withToken(tokOps), c.req)
		var got []string
		for _, e := range resp.GetEvents() {
			got = append(got, e.GetEventId())
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ListInboxEvents(%v) = %v, %v; want %v", c.req, got, err, c.want)
		}
	}
	_, err = ts.client.ListInboxEvents(withToken(tokOps), &fulfillmentv1.ListInboxEventsRequest{Provider: "Yolfi Inc"})
	wantCode(t, "a malformed provider", err, codes.InvalidArgument, "provider: must be a provider name")
	_, err = ts.client.ListInboxEvents(withToken(tokOps), &fulfillmentv1.ListInboxEventsRequest{ReceivedAfter: halfHourAgo, ReceivedBefore: halfHourAgo})
	wantCode(t, "an empty time range", err, codes.InvalidArgument, "received_before: must be later than received_after")
	if code, body := ts.do(t, http.MethodGet, "/v1/events?received_after=yesterday", tokOps, nil); code != http.StatusBadRequest {
		t.Errorf("REST events with a malformed time: %d %v, want 400", code, body)
	}
	if code, body := ts.do(t, http.MethodGet, "/v1/events?provider=yolfi&received_before="+url.QueryEscape(halfHourAgo.AsTime().Format(time.RFC3339Nano)), tokOps, nil); code != http.StatusOK ||
		len(body["events"].([]any)) != 1 {
		t.Errorf("REST events before half an hour ago: %d %v, want evt_stray", code, body)
	}

	paid, err := ts.client.GetInboxEvent(withToken(tokOps), &fulfillmentv1.GetInboxEventRequest{InboxEventId: events["evt_paid"]})
	if err != nil {
		t.Fatal(err)
	}
	orderID := paid.GetEvent().GetOrderId()
	resp, err := ts.client.ListInboxEvents(withToken(tokOps), &fulfillmentv1.ListInboxEventsRequest{OrderId: orderID})
	if err != nil || len(resp.GetEvents()) != 2 {
		t.Errorf("the order's events: %v, %v", resp, err)
	}
	e := paid.GetEvent()
	if string(e.GetRawBody()) != `{"id":"evt_paid"}` || e.GetRawBodyStatus() != "included" || e.GetDecision() != "fulfilled" ||
		e.GetState() != "processed" || e.GetAttempts() != 1 || e.GetProcessTime() == nil || e.GetPayment().GetInvoiceId() != "inv_evt_paid" ||
		e.GetEndpointId() != "yolfi-org-a" || e.GetReplayCount() != 0 {
		t.Errorf("GetInboxEvent: %v", e)
	}
	code, body := ts.do(t, http.MethodGet, "/v1/events/"+events["evt_paid"], tokOps, nil)
	if raw, _ := base64.StdEncoding.DecodeString(fmt.Sprint(body["event"].(map[string]any)["raw_body"])); code != http.StatusOK || string(raw) != `{"id":"evt_paid"}` {
		t.Errorf("REST GetInboxEvent: %d %v", code, body)
	}
	_, err = ts.client.GetInboxEvent(withToken(tokAdminA), &fulfillmentv1.GetInboxEventRequest{InboxEventId: events["evt_b"]})
	wantHidden(t, "org_a's admin reading org_b's event", err, "not found: stored event "+events["evt_b"])
	_, err = ts.client.ReplayInboxEvent(withToken(tokAdminA), &fulfillmentv1.ReplayInboxEventRequest{InboxEventId: events["evt_b"]})
	wantHidden(t, "org_a's admin replaying org_b's event", err, "not found: stored event "+events["evt_b"])
	if b, err := ts.client.GetInboxEvent(withToken(tokOps), &fulfillmentv1.GetInboxEventRequest{InboxEventId: events["evt_b"]}); err != nil ||
		b.GetEvent().GetState() != "unmatched" || b.GetEvent().GetReplayCount() != 0 {
		t.Errorf("org_b's event after the refused replay: %v, %v", b, err)
	}
	_, err = ts.client.GetInboxEvent(withToken(tokOps), &fulfillmentv1.GetInboxEventRequest{InboxEventId: "999999"})
	wantCode(t, "an unknown event", err, codes.NotFound, "stored event 999999")
	_, err = ts.client.ListInboxEvents(withToken(tokOps), &fulfillmentv1.ListInboxEventsRequest{State: "done"})
	wantCode(t, "an unknown state", err, codes.InvalidArgument, "state")

	// Replay: pending again, recorded; a second replay while pending is
	// refused; the processor decides it again without a second effect.
	rep, err := ts.client.ReplayInboxEvent(withToken(tokAdminA), &fulfillmentv1.ReplayInboxEventRequest{InboxEventId: events["evt_paid"], ActorDetail: "checking a support case"})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.GetEvent()
	if r.GetState() != "pending" || r.GetAttempts() != 0 || r.GetNextAttemptTime() == nil || r.GetReplayCount() != 1 || len(r.GetReplays()) != 1 ||
		r.GetReplays()[0].GetReplayedBy() != "admin-a" || r.GetReplays()[0].GetReplayedByDetail() != "checking a support case" ||
		r.GetReplays()[0].GetPreviousDecision() != "fulfilled" || r.GetReplays()[0].GetPreviousState() != "processed" || r.GetRawBody() != nil {
		t.Errorf("replayed event: %v", r)
	}
	_, err = ts.client.ReplayInboxEvent(withToken(tokOps), &fulfillmentv1.ReplayInboxEventRequest{InboxEventId: events["evt_paid"]})
	wantCode(t, "replaying a pending event", err, codes.FailedPrecondition, "is pending already")
	processInbox(t, store, 1)
	after, err := ts.client.GetInboxEvent(withToken(tokOps), &fulfillmentv1.GetInboxEventRequest{InboxEventId: events["evt_paid"]})
	if err != nil || after.GetEvent().GetDecision() != "fulfilled" || after.GetEvent().GetState() != "processed" || after.GetEvent().GetReplayCount() != 1 {
		t.Errorf("decided again: %v, %v", after, err)
	}
	order, err := ts.client.GetOrder(withToken(tokOps), &fulfillmentv1.GetOrderRequest{OrderId: orderID})
	if err != nil || order.GetOrder().GetState() != "fulfilled" || len(order.GetOrder().GetHistory().GetEntitlements()) != 1 ||
		len(order.GetOrder().GetHistory().GetLedgerEntries()) != 1 {
		t.Errorf("the order after the replay: %v, %v", order, err)
	}
	code, body = ts.do(t, http.MethodPost, "/v1/events/"+events["evt_stray"]+":replay", tokOps, map[string]any{})
	if ev, _ := body["event"].(map[string]any); code != http.StatusOK || ev["state"] != "pending" || ev["replay_count"] != float64(1) {
		t.Errorf("REST replay: %d %v", code, body)
	}
}

// A time filter outside the range a Timestamp may hold (years 1 to 9999)
// is refused, naming the field, as the REST gateway refuses it: the
// database took such a time for another one (a listing "after" a time
// millions of years away listed today's events) or failed (INTERNAL).
func TestTimeFiltersOutOfRange(t *testing.T) {
	t.Parallel()
	ts, _, _ := reconFixture(t)
	far := &timestamppb.Timestamp{Seconds: 1 << 62}            // wraps around in the database
	farther := &timestamppb.Timestamp{Seconds: 1 << 44}        // out of the database's range
	year10000 := &timestamppb.Timestamp{Seconds: 253402300800} // 10000-01-01
	early := &timestamppb.Timestamp{Seconds: -(1 << 44)}
	for _, c := range []struct {
		field string
		ts    *timestamppb.Timestamp
	}{{"far", far}, {"farther", farther}, {"year 10000", year10000}, {"early", early}} {
		resp, err := ts.client.ListInboxEvents(withToken(tokOps), &fulfillmentv1.ListInboxEventsRequest{ReceivedAfter: c.ts})
		wantCode(t, c.field+": events received after it", err, codes.InvalidArgument, "received_after")
		if len(resp.GetEvents()) > 0 {
			t.Errorf("%s: events received after it: %d listed", c.field, len(resp.GetEvents()))
		}
		_, err = ts.client.ListInboxEvents(withToken(tokOps), &fulfillmentv1.ListInboxEventsRequest{ReceivedBefore: c.ts})
		wantCode(t, c.field+": events received before it", err, codes.InvalidArgument, "received_before")
		_, err = ts.client.ListReconciliationItems(withToken(tokOps), &fulfillmentv1.ListReconciliationItemsRequest{CreateTimeFrom: c.ts})
		wantCode(t, c.field+": items created from it", err, codes.InvalidArgument, "create_time_from")
		_, err = ts.client.ListReconciliationItems(withToken(tokOps), &fulfillmentv1.ListReconciliationItemsRequest{CreateTimeBefore: c.ts})
		wantCode(t, c.field+": items created before it", err, codes.InvalidArgument, "create_time_before")
		filter := &fulfillmentv1.RedriveFilter{Target: "events", OrgId: "org_a", State: "processed", ReceivedAfter: c.ts}
		_, err = ts.client.PlanRedrive(withToken(tokOps), &fulfillmentv1.PlanRedriveRequest{Filter: filter})
		wantCode(t, c.field+": a re-drive plan", err, codes.InvalidArgument, "received_after")
		_, err = ts.client.StartRedrive(withToken(tokOps), &fulfillmentv1.StartRedriveRequest{Filter: filter})
		wantCode(t, c.field+": a re-drive", err, codes.InvalidArgument, "received_after")
	}
	// The range's ends are times.
	for _, end := range []*timestamppb.Timestamp{{Seconds: -62135596800}, {Seconds: 253402300799, Nanos: 999999999}} {
		if _, err := ts.client.ListInboxEvents(withToken(tokOps), &fulfillmentv1.ListInboxEventsRequest{ReceivedBefore: end}); err != nil {
			t.Errorf("events received before %v: %v", end.AsTime(), err)
		}
	}
}

// Another org's re-drive answers as an unknown one does, with the same
// message, to GetRedrive and CancelRedrive: an unknown id answered
// "reading re-drive N: not found: no rows in result set" (the driver's
// words) and another org's "not found", which told a token limited to org_a
// which ids were other orgs' runs.
func TestOtherOrgsRedriveHidden(t *testing.T) {
	t.Parallel()
	ts, _, _ := reconFixture(t)
	started, err := ts.client.StartRedrive(withToken(tokOps), &fulfillmentv1.StartRedriveRequest{
		Filter: &fulfillmentv1.RedriveFilter{Target: "events", OrgId: "org_b", State: "unmatched"}})
	if err != nil {
		t.Fatal(err)
	}
	id := started.GetRedrive().GetId()
	unknown := "999999"
	for _, c := range []struct{ id, msg string }{{id, "not found: re-drive " + id}, {unknown, "not found: re-drive " + unknown}} {
		_, err := ts.client.GetRedrive(withToken(tokAdminA), &fulfillmentv1.GetRedriveRequest{RedriveId: c.id})
		wantHidden(t, "org_a's admin reading re-drive "+c.id, err, c.msg)
		_, err = ts.client.CancelRedrive(withToken(tokAdminA), &fulfillmentv1.CancelRedriveRequest{RedriveId: c.id})
		wantHidden(t, "org_a's admin cancelling re-drive "+c.id, err, c.msg)
	}
	_, err = ts.client.GetRedrive(withToken(tokOps), &fulfillmentv1.GetRedriveRequest{RedriveId: unknown})
	wantHidden(t, "an unknown re-drive", err, "not found: re-drive "+unknown)
	if got, err := ts.client.GetRedrive(withToken(tokOps), &fulfillmentv1.GetRedriveRequest{RedriveId: id}); err != nil ||
		got.GetRedrive().GetCancelledBy() != "" {
		t.Errorf("org_b's re-drive after org_a's refused cancel: %v, %v", got, err)
	}
}
