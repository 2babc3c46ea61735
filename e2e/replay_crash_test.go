package e2e_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
)

// TestCrashResolvingAReplaysItem kills fulfillmentd while it decides a
// payment a person replayed, the transaction that also resolves the
// payment's unmatched_payment item: before its commit, and just after. The
// payment came before its order, and its order was created after the late
// match window, so only the replay applies it. Whatever the kill left, after
// a restart and a redelivery the order is fulfilled once and the payment's
// one item is resolved once, as retried by the service: the item is never
// resolved without the decision, nor the decision made without the item.
func TestCrashResolvingAReplaysItem(t *testing.T) {
	t.Parallel()
	bin := procFailpointBuild.binary(t)
	for i, tc := range []struct {
		spec      string // the first hit decides the payment unmatched, the second its replay
		committed bool
	}{
		{"process-before-commit:2", false},
		{"process-after-commit:2", true},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ps := newProcService(t, bin)
			ps.queueOnly = true
			ps.configure = func(c *config.Config) { c.Inbox.LateMatchWindow = time.Millisecond }
			p := ps.start(t, tc.spec)
			mid := "replay-crash-" + strconv.Itoa(i)
			paid := event(yolfi.TypePaymentConfirmed, mid, "inv_"+mid)
			p.sendOK(t, paid)
			waitEventState(t, p.stack, paid.ID, "unmatched")
			time.Sleep(5 * time.Millisecond) // past the late match window
			order := p.createOrder(t, "live", mid)
			if e := p.effects(t, order.GetId()); e.State != "pending_payment" || e.Licenses != 0 {
				t.Fatalf("after CreateOrder: %v; want pending_payment and nothing granted (no late match)", e)
			}
			var id int64
			if err := p.db.QueryRow(ctx, "SELECT id FROM inbox_events WHERE event_id = $1", paid.ID).Scan(&id); err != nil {
				t.Fatal(err)
			}
			items := func(s *stack) (open, resolved, total int) {
				t.Helper()
				q := "SELECT count(*) FROM reconciliation_items WHERE inbox_event_id = $1 AND kind = 'unmatched_payment'"
				return s.count(t, q+" AND state = 'open'", id),
					s.count(t, q+" AND state = 'resolved' AND resolution = 'retried' AND resolved_by = 'service'", id),
					s.count(t, q, id)
			}
			if open, _, total := items(p.stack); open != 1 || total != 1 {
				t.Fatalf("before the replay: %d open of %d unmatched_payment items, want 1 of 1", open, total)
			}
			// The replay is queued; the processor dies deciding it — at
			// times before the call's answer is written, which is then
			// lost with the process (UNAVAILABLE): the replay committed
			// all the same (its processing followed), and what follows
			// checks what it left.
			if _, err := p.client.ReplayInboxEvent(authed(adminToken),
				&fulfillmentv1.ReplayInboxEventRequest{InboxEventId: strconv.FormatInt(id, 10), ActorDetail: "test"}); err != nil &&
				status.Code(err) != codes.Unavailable {
				t.Fatalf("replaying the payment: %v", err)
			}
			st := p.waitExit(t, 20*time.Second)
			point, _, _ := strings.Cut(tc.spec, ":")
			if !daemon.Killed(st) || !strings.Contains(p.output.String(), "failpoint: killing the process at "+point) {
				t.Fatalf("fulfillmentd exited with %v; want killed at %s", st, point)
			}

			// What the kill left: the decision and the item's resolution
			// together, or neither.
			open, resolved, total := items(p.stack)
			e := p.effects(t, order.GetId())
			row := inboxEvent(t, p.stack, paid.ID)
			if tc.committed {
				if row.State != "processed" || e.State != "fulfilled" || e.Licenses != 2 || open != 0 || resolved != 1 || total != 1 {
					t.Fatalf("after a kill past the commit: event %v, order %v, items %d open %d resolved of %d; "+
						"want processed, fulfilled with 2 licenses, the one item resolved", row, e, open, resolved, total)
				}
			} else if row.State != "pending" || e.State != "pending_payment" || e.Licenses != 0 || open != 1 || total != 1 {
				t.Fatalf("after a kill before the commit: event %v, order %v, items %d open of %d; "+
					"want pending, nothing granted, the one item open", row, e, open, total)
			}

			// A new process decides the replay again, or not at all, and the
			// provider redelivers the unacknowledged past.
			p2 := ps.start(t, "")
			p2.settle(t)
			p2.sendOK(t, paid)
			p2.settle(t)
			if e := p2.effects(t, order.GetId()); e.State != "fulfilled" || e.Licenses != 2 || e.Credits != 1 || e.Attempts != 1 {
				t.Errorf("after the restart: %v; want fulfilled, 2 licenses, 1 credit and 1 attempt", e)
			}
			if open, resolved, total := items(p2.stack); open != 0 || resolved != 1 || total != 1 {
				t.Errorf("after the restart: %d open and %d resolved of %d unmatched_payment items; want the one item resolved as retried by the service",
					open, resolved, total)
			}
			if row := inboxEvent(t, p2.stack, paid.ID); row.State != "processed" || row.Decision != "fulfilled" {
				t.Errorf("after the restart: event %v; want processed, fulfilled", row)
			}
		})
	}
}
