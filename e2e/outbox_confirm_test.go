package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chromedp/chromedp"
	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// orgBAdminToken holds admin for another org than the order's.
const orgBAdminToken = "tok-org-b-admin-0123456789abcdef"

// A destination that does not honour idempotency keys applies a message
// and loses its answer: the message is uncertain and its order waits. The
// person who checked with the destination confirms it has the message:
// nothing is sent again, the order is fulfilled, the item is resolved with
// the note. Only an admin of the order's org can; a note is required; a
// second confirmation changes nothing.
func TestConfirmingAnUncertainDeliveryFulfilsTheOrderWithoutSendingAgain(t *testing.T) {
	t.Parallel()
	blind := startReceiver(t, false, slowOnce)
	s := startReplicaWith(t, pgtest.DB(t), func(c *config.Config) {
		withDestinations(destination(t, "blind", blind, false, 300*time.Millisecond))(c)
		c.Auth.Tokens = append(c.Auth.Tokens, config.Token{Name: "org-b-admin", Secret: orgBAdminToken,
			Scopes: []string{config.ScopeAdmin}, Orgs: []string{"org_b"}})
	})
	order, key, id := s.uncertainDelivery(t, "confirm-1", "blind")
	path := "/v1/outbox/messages/" + id + ":confirmDelivery"
	note := map[string]any{"note": "blind's on-call saw it applied once (INC-7)", "actor_detail": "Ann"}

	// Refused, nothing changed: without admin, for another org, without a
	// note, for an unknown message.
	if _, err := s.client.ConfirmOutboxDelivery(authed(orgAToken), &fulfillmentv1.ConfirmOutboxDeliveryRequest{MessageId: id, Note: "x"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("confirmation by org-a without admin: %v, want PermissionDenied", err)
	}
	for _, tc := range []struct {
		what, path, token string
		body              map[string]any
		want              int
	}{
		{"another org's admin", path, orgBAdminToken, note, http.StatusNotFound},
		{"no note", path, adminToken, map[string]any{}, http.StatusBadRequest},
		{"an unknown message", "/v1/outbox/messages/999999:confirmDelivery", adminToken, note, http.StatusNotFound},
		{"a malformed id", "/v1/outbox/messages/abc:confirmDelivery", adminToken, note, http.StatusBadRequest},
	} {
		if code, body := s.rest(t, "POST", tc.path, tc.token, tc.body); code != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.what, code, body, tc.want)
		}
	}
	if got := s.message(t, key); got != "uncertain" {
		t.Fatalf("message is %s after refused confirmations, want uncertain", got)
	}

	code, body := s.rest(t, "POST", path, adminToken, note)
	if code != http.StatusOK || body["message"].(map[string]any)["state"] != "delivered" {
		t.Fatalf("confirmation = %d %v, want 200 and the message delivered", code, body)
	}
	if _, err := s.client.ConfirmOutboxDelivery(authed(adminToken), &fulfillmentv1.ConfirmOutboxDeliveryRequest{MessageId: id, Note: "again"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("second confirmation: %v, want FailedPrecondition", err)
	}
	if st := s.effects(t, order.GetId()).State; st != "fulfilled" {
		t.Errorf("order is %s after the confirmation, want fulfilled", st)
	}
	time.Sleep(500 * time.Millisecond) // claim polls: nothing may be sent
	if n, e := blind.Requests(key), blind.Effects(key); n != 1 || e != 1 {
		t.Errorf("receiver: %d requests, %d effects; want the first one only", n, e)
	}
	items, err := s.client.ListReconciliationItems(authed(adminToken), &fulfillmentv1.ListReconciliationItemsRequest{Kind: "uncertain_delivery", State: "resolved"})
	if err != nil || len(items.GetItems()) != 1 {
		t.Fatalf("resolved uncertain_delivery items = %v, %v; want 1", items, err)
	}
	if it := items.GetItems()[0]; it.GetResolution() != "confirmed_delivered" || it.GetResolvedBy() != "admin" ||
		it.GetResolutionNote() != note["note"] || it.GetOutboxMessageId() != id {
		t.Errorf("item = %v, want resolved confirmed_delivered by admin with the note", it)
	}
	if n := s.count(t, `SELECT count(*) FROM order_events WHERE order_id = $1 AND topic = 'order.fulfilled'`, order.GetId()); n != 1 {
		t.Errorf("%d order.fulfilled events, want 1", n)
	}
}

// The same in the console: the admin opens the uncertain message, writes
// how the destination confirmed it and confirms; the message is delivered,
// the order fulfilled, nothing sent again, the action in the audit log. A
// blank note is refused (400) and changes nothing.
func TestConsoleConfirmsAnUncertainDelivery(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	blind := startReceiver(t, false, slowOnce)
	s := startReplicaWith(t, pgtest.DB(t), withConsole(destination(t, "blind", blind, false, 300*time.Millisecond)))
	order, key, id := s.uncertainDelivery(t, "console-confirm-1", "blind")

	admin := newTab(t, browser)
	admin.signIn(s.restURL, adminToken)
	admin.open(s.restURL+"/console/outbox/"+id, "[data-action=confirm-delivered]")
	admin.accessible("uncertain outbox message")
	if code := admin.post("/console/outbox/"+id+"/confirm", map[string]string{"csrf": admin.csrf(), "note": "  "}); code != http.StatusBadRequest {
		t.Errorf("a confirmation with a blank note answered %d, want 400", code)
	}
	if got := s.message(t, key); got != "uncertain" {
		t.Fatalf("a blank note's confirmation changed the message: %s", got)
	}
	admin.do("confirming", chromedp.SendKeys(chromedp.CSS("#confirm-note"), "blind's on-call sees it applied once"),
		chromedp.Click(chromedp.CSS("[data-action=confirm-delivered]"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	if got := admin.text("[data-testid=message-state]"); got != "delivered" {
		t.Errorf("the page shows the message %s, want delivered", got)
	}
	if n := admin.count("[data-action=confirm-delivered]"); n != 0 {
		t.Errorf("a delivered message still offers %d confirmations", n)
	}
	if st := s.effects(t, order.GetId()).State; st != "fulfilled" {
		t.Errorf("order is %s after the confirmation, want fulfilled", st)
	}
	if n := blind.Requests(key); n != 1 {
		t.Errorf("the receiver had %d requests, want the first only", n)
	}
	admin.open(s.restURL+"/console/audit?action=outbox.confirm_delivered", "[data-testid=audit]")
	// The refused one is recorded too.
	if n := admin.count("[data-testid=audit] tr[data-action='outbox.confirm_delivered']"); n != 2 {
		t.Errorf("the audit log holds %d confirmations, want 2 (one refused, one done)", n)
	}
}

// uncertainDelivery pays a new order moi with one line for destination,
// whose receiver loses the first answer (slowOnce) and does not honour
// idempotency keys, and waits until the line's message is uncertain and
// the order still fulfilling. It returns the order and the message's key
// and id.
func (s *stack) uncertainDelivery(t *testing.T, moi, destination string) (order *fulfillmentv1.Order, key, id string) {
	t.Helper()
	order = s.createExternalOrder(t, moi, destination)
	s.pay(t, moi)
	key = fulfillment.LineKey(order.GetId(), 1)
	waitFor(t, "uncertain", func() bool { return s.message(t, key) == "uncertain" })
	if st := s.effects(t, order.GetId()).State; st != "fulfilling" {
		t.Fatalf("order is %s with its only delivery uncertain, want fulfilling", st)
	}
	if err := s.db.QueryRow(t.Context(), `SELECT id::text FROM outbox_messages WHERE idempotency_key = $1`, key).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return order, key, id
}
