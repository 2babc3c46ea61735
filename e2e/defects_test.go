package e2e_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

const orgAdminToken = "tok-org-a-admin-0123456789abcdef"

// Destinations are shared by every org: an admin token limited to one org
// may list them, their messages counted for its org only, but not disable
// or enable one, over gRPC and REST, and the destination is left as it was.
func TestOrgLimitedAdminCannotToggleDestinations(t *testing.T) {
	t.Parallel()
	crm := startReceiver(t, true, nil)
	s := startReplicaWith(t, pgtest.DB(t), func(c *config.Config) {
		withDestinations(destination(t, "crm", crm, true, 0))(c)
		c.Auth.Tokens = append(c.Auth.Tokens, config.Token{Name: "org-a-admin", Secret: orgAdminToken,
			Scopes: []string{config.ScopeAdmin}, Orgs: []string{orgA}})
	})
	limited := authed(orgAdminToken)
	if _, err := s.client.DisableDestination(limited, &fulfillmentv1.DisableDestinationRequest{DestinationId: "crm", Reason: "mine"}); status.Code(err) != codes.PermissionDenied ||
		!strings.Contains(status.Convert(err).Message(), "every org") {
		t.Errorf("org-limited disable: %v, want PERMISSION_DENIED saying it takes a token for every org", err)
	}
	if code, body := s.rest(t, "POST", "/v1/outbox/destinations/crm:disable", orgAdminToken, map[string]any{"reason": "mine"}); code != http.StatusForbidden {
		t.Errorf("org-limited disable over REST = %d %v, want 403", code, body)
	}
	dests, err := s.client.ListDestinations(limited, &fulfillmentv1.ListDestinationsRequest{})
	if err != nil || len(dests.GetDestinations()) != 1 || !dests.GetDestinations()[0].GetEnabled() {
		t.Fatalf("destinations after the refused disable = %v, %v; want crm enabled", dests, err)
	}
	if n := s.count(t, "SELECT count(*) FROM outbox_destinations WHERE disabled_at IS NOT NULL"); n != 0 {
		t.Errorf("%d destinations disabled in the database, want 0", n)
	}
	admin := authed(adminToken)
	if _, err := s.client.DisableDestination(admin, &fulfillmentv1.DisableDestinationRequest{DestinationId: "crm", Reason: "maintenance"}); err != nil {
		t.Fatalf("every-org admin disable: %v", err)
	}
	// While it is disabled, its messages wait: each token sees them counted
	// for the orgs it may see. The limited admin saw every org's.
	if _, err := s.db.Exec(context.Background(), `
		INSERT INTO outbox_messages (destination_id, topic, idempotency_key, org_id, environment, required, payload, state)
		VALUES ('crm', 'order.fulfilled', 'b1', 'org_b', 'live', false, '{}', 'pending'),
			('crm', 'order.fulfilled', 'b2', 'org_b', 'live', false, '{}', 'pending'),
			('crm', 'order.fulfilled', 'b3', 'org_b', 'live', false, '{}', 'failed'),
			('crm', 'order.fulfilled', 'a1', $1, 'live', false, '{}', 'pending')`, orgA); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name            string
		ctx             context.Context
		pending, failed int64
	}{{"org_a's admin", limited, 1, 0}, {"the every-org admin", admin, 3, 1}} {
		dests, err := s.client.ListDestinations(c.ctx, &fulfillmentv1.ListDestinationsRequest{})
		if err != nil || len(dests.GetDestinations()) != 1 {
			t.Fatalf("%s: destinations %v, %v", c.name, dests, err)
		}
		if d := dests.GetDestinations()[0]; d.GetPending() != c.pending || d.GetFailed() != c.failed {
			t.Errorf("%s: crm's messages counted %d pending, %d failed; want %d and %d", c.name, d.GetPending(), d.GetFailed(), c.pending, c.failed)
		}
	}
	if _, err := s.client.EnableDestination(limited, &fulfillmentv1.EnableDestinationRequest{DestinationId: "crm"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("org-limited enable: %v, want PERMISSION_DENIED", err)
	}
	if _, err := s.client.EnableDestination(admin, &fulfillmentv1.EnableDestinationRequest{DestinationId: "crm"}); err != nil {
		t.Errorf("every-org admin enable: %v", err)
	}
}

// A bank that cannot be reached: StartPayment answers UNAVAILABLE saying
// how the call failed, and neither the answer nor the order's stored
// attempt shows the bank's internal address.
func TestStartPaymentHidesProviderAddress(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	_ = lis.Close() // nothing listens there now: connection refused
	s := startTBank(t, fakebank.Options{}, withTBankAPI(t, tbankFail, "http://"+dead+"/internal-bank-api"))
	order := s.createRUBOrder(t, "tb-dead")
	_, err = s.startPayment(order.GetId(), tbankFail, false)
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.Unavailable || !strings.Contains(msg, "connection refused") {
		t.Errorf("start against an unreachable bank: %v, want UNAVAILABLE saying connection refused", err)
	}
	got, gerr := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: order.GetId()})
	if gerr != nil {
		t.Fatal(gerr)
	}
	stored := protojson.Format(got)
	for _, secret := range []string{dead, "internal-bank-api", "127.0.0.1"} {
		if strings.Contains(msg, secret) || strings.Contains(stored, secret) {
			t.Errorf("the bank's address (%s) shows: answer %q, order %s", secret, msg, stored)
		}
	}
}

// An admin limited to org_a who asks the console to re-drive org_b's events
// is refused, and the refusal is in the audit log of its own actions only:
// org_b's operators do not see it. The entry was filed under the org the
// form named, so any org-limited admin could write entries, with its own
// text, into another org's audit page.
func TestConsoleRefusedActionStaysOutOfAnotherOrgsAudit(t *testing.T) {
	t.Parallel()
	s := startReplicaWith(t, pgtest.DB(t), func(c *config.Config) {
		withConsole()(c)
		c.Auth.Tokens = append(c.Auth.Tokens, config.Token{Name: "org-a-admin", Secret: orgAdminToken,
			Scopes: []string{config.ScopeAdmin}, Orgs: []string{orgA}})
	})
	signIn := func(token string) *http.Client { return signInHTTP(t, s.restURL, token).c }
	page := func(c *http.Client, path string) string {
		t.Helper()
		resp, err := c.Get(s.restURL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return string(b)
	}
	const planted = "planted-by-org-a"
	orgAAdmin := signIn(orgAdminToken)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page(orgAAdmin, "/console/audit"))
	if m == nil {
		t.Fatal("no CSRF token on the audit page")
	}
	resp, err := orgAAdmin.PostForm(s.restURL+"/console/redrive", url.Values{"csrf": {m[1]},
		"target": {"events"}, "org_id": {orgB}, "state": {"failed"}, "type": {planted}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("org_a's admin re-driving org_b: %d, want 403", resp.StatusCode)
	}
	if own := page(orgAAdmin, "/console/audit?action=redrive.start"); !strings.Contains(own, "PermissionDenied") {
		t.Errorf("org_a's admin's audit lacks its refused re-drive:\n%s", own)
	}
	if b := page(signIn(orgBOpsToken), "/console/audit"); strings.Contains(b, planted) || strings.Contains(b, "org-a-admin") {
		t.Errorf("org_b's audit shows org_a's admin's refused action:\n%s", b)
	}
}
