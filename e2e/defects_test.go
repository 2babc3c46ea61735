package e2e_test

import (
	"net"
	"net/http"
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
// may list them but not disable or enable one, over gRPC and REST, and the
// destination is left as it was.
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
