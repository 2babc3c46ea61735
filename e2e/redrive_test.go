package e2e_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// A bulk retry of failed messages: planned (nothing changes), started by
// two operators at once (one run starts), applied to each message once,
// and delivered once each at the receiver.
func TestRedriveOutboxEachMessageOnce(t *testing.T) {
	t.Parallel()
	erp := startReceiver(t, false, receiver.Always(receiver.Action{Status: 500})) // every request that succeeds is an effect: a second delivery would show
	d := destination(t, "erp", erp, true, 5*time.Second)
	d.MaxAttempts = 2
	s := startReplicaWith(t, pgtest.DB(t), withDestinations(d))
	const orders = 5
	for i := range orders {
		moi := "redrive-" + string(rune('a'+i))
		s.createExternalOrder(t, moi, "erp")
		s.pay(t, moi)
	}
	s.settle(t)
	waitFor(t, "every message failed", func() bool {
		return s.count(t, "SELECT count(*) FROM outbox_messages WHERE destination_id = 'erp' AND state = 'failed'") == orders
	})
	filter := &fulfillmentv1.RedriveFilter{Target: "outbox", OrgId: orgA, State: "failed", DestinationId: "erp"}

	plan, err := s.client.PlanRedrive(authed(adminToken), &fulfillmentv1.PlanRedriveRequest{Filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	if plan.GetMatched() != orders || len(plan.GetSample()) != orders || plan.GetCapped() {
		t.Fatalf("plan: %d matched, %d sampled, capped %v; want %d", plan.GetMatched(), len(plan.GetSample()), plan.GetCapped(), orders)
	}
	if n := s.count(t, "SELECT count(*) FROM outbox_messages WHERE state = 'failed'"); n != orders {
		t.Fatalf("planning changed messages: %d failed", n)
	}
	if _, err := s.client.PlanRedrive(authed(orgAToken), &fulfillmentv1.PlanRedriveRequest{Filter: filter}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a non-admin plan: %v, want PERMISSION_DENIED", err)
	}
	bad := &fulfillmentv1.RedriveFilter{Target: "outbox", OrgId: orgA, State: "delivered"}
	if _, err := s.client.PlanRedrive(authed(adminToken), &fulfillmentv1.PlanRedriveRequest{Filter: bad}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a plan of delivered messages: %v, want INVALID_ARGUMENT", err)
	}
	// A destination that is not configured has no dispatcher to retry
	// for: a typo is said, not planned as "nothing matches".
	typo := &fulfillmentv1.RedriveFilter{Target: "outbox", OrgId: orgA, State: "failed", DestinationId: "epr"}
	_, err = s.client.PlanRedrive(authed(adminToken), &fulfillmentv1.PlanRedriveRequest{Filter: typo})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `destination "epr" is not configured`) {
		t.Fatalf("a plan for an unknown destination: %v, want NOT_FOUND naming it", err)
	}

	erp.SetPlan(nil) // the receiver is back
	var started []*fulfillmentv1.Redrive
	var refused []error
	results := make([]error, 2)
	runs := make([]*fulfillmentv1.Redrive, 2)
	race(2, func(i int) {
		resp, err := s.client.StartRedrive(authed(adminToken), &fulfillmentv1.StartRedriveRequest{Filter: filter, ActorDetail: "test"})
		results[i], runs[i] = err, resp.GetRedrive()
	})
	for i, err := range results {
		if err == nil {
			started = append(started, runs[i])
		} else {
			refused = append(refused, err)
		}
	}
	if len(started) != 1 || status.Code(refused[0]) != codes.FailedPrecondition {
		t.Fatalf("two concurrent starts: %d started, refusals %v; want one started, one FAILED_PRECONDITION", len(started), refused)
	}
	run := started[0]
	if run.GetTotal() != orders || run.GetCreatedBy() != "admin" {
		t.Fatalf("run: %d items by %q", run.GetTotal(), run.GetCreatedBy())
	}
	waitFor(t, "the run done", func() bool {
		got, err := s.client.GetRedrive(authed(adminToken), &fulfillmentv1.GetRedriveRequest{RedriveId: run.GetId()})
		run = got.GetRedrive()
		return err == nil && run.GetState() == "done"
	})
	if run.GetApplied() != orders || run.GetSkipped() != 0 {
		t.Fatalf("run done: %d applied, %d skipped", run.GetApplied(), run.GetSkipped())
	}
	waitFor(t, "every message delivered", func() bool {
		return s.count(t, "SELECT count(*) FROM outbox_messages WHERE destination_id = 'erp' AND state = 'delivered'") == orders
	})
	if n := erp.TotalEffects(); n != orders {
		t.Errorf("the receiver applied %d effects, want %d (one per message)", n, orders)
	}
	if d := erp.Doubled(); len(d) > 0 {
		t.Errorf("keys applied twice: %v", d)
	}
	if n := s.count(t, "SELECT count(DISTINCT item_id) FROM redrive_items"); n != orders {
		t.Errorf("%d distinct items recorded, want %d", n, orders)
	}
	// Nothing is left to retry: a second run is refused, and the first
	// can no longer be cancelled.
	if _, err := s.client.StartRedrive(authed(adminToken), &fulfillmentv1.StartRedriveRequest{Filter: filter}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a run matching nothing: %v, want FAILED_PRECONDITION", err)
	}
	if _, err := s.client.CancelRedrive(authed(adminToken), &fulfillmentv1.CancelRedriveRequest{RedriveId: run.GetId()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("cancelling a done run: %v, want FAILED_PRECONDITION", err)
	}
	list, err := s.client.ListRedrives(authed(adminToken), &fulfillmentv1.ListRedrivesRequest{OrgId: orgA})
	if err != nil || len(list.GetRedrives()) != 1 {
		t.Fatalf("list: %v, %d runs", err, len(list.GetRedrives()))
	}
}

// A bulk replay of processed events decides each again and changes no
// effect: the orders keep one license and one credit each.
func TestRedriveEventsChangesNoEffect(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	var ids []string
	for i := range 3 {
		moi := "replay-all-" + string(rune('a'+i))
		ids = append(ids, s.createOrder(t, "live", moi).GetId())
		s.sendOK(t, event(yolfi.TypePaymentConfirmed, moi, "inv_"+moi))
	}
	s.settle(t)
	before := make([]string, len(ids))
	for i, id := range ids {
		before[i] = s.effects(t, id).String()
	}
	filter := &fulfillmentv1.RedriveFilter{Target: "events", OrgId: orgA, State: "processed", Type: yolfi.TypePaymentConfirmed}
	resp, err := s.client.StartRedrive(authed(adminToken), &fulfillmentv1.StartRedriveRequest{Filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	run := resp.GetRedrive()
	waitFor(t, "the run done", func() bool {
		got, err := s.client.GetRedrive(authed(adminToken), &fulfillmentv1.GetRedriveRequest{RedriveId: run.GetId()})
		run = got.GetRedrive()
		return err == nil && run.GetState() == "done"
	})
	s.settle(t)
	if run.GetTotal() != 3 || run.GetApplied() != 3 {
		t.Fatalf("run: %d applied of %d", run.GetApplied(), run.GetTotal())
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_replays"); n != 3 {
		t.Fatalf("%d replays recorded, want 3", n)
	}
	for i, id := range ids {
		if after := s.effects(t, id).String(); after != before[i] {
			t.Errorf("order %s: before %s, after %s", id, before[i], after)
		}
	}
}
