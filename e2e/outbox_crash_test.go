package e2e_test

// The outbox across crashes of a real fulfillmentd process: a message whose
// causing transaction was rolled back does not exist; one whose delivery was
// answered but not recorded is sent again under the same key — which an
// idempotent receiver applies once — and never again to a receiver that
// does not honour keys.

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// procDestination is a destination of a child process, posting to r.
func procDestination(id string, r *receiver.Receiver, idempotent bool) config.Destination {
	return config.Destination{ID: id, URL: r.URL(), Idempotent: &idempotent, Timeout: 5 * time.Second,
		Secrets: []config.Secret{{Env: procEnvOutboxSecret}}}
}

func TestOutboxCrash(t *testing.T) {
	t.Parallel()
	bin := procFailpointBuild.binary(t)
	cases := []struct {
		name, failpoint string
		idempotent      bool
		// After the restart: requests and effects at the receiver, and the
		// message's state.
		requests, effects int
		state             string
	}{
		// The payment's transaction rolled back with the message in it.
		{"rolled back", "process-before-commit", true, 1, 1, "delivered"},
		// Answered 200, killed before recording it: sent again, same key.
		{"answered, not recorded", "outbox-after-send", true, 2, 1, "delivered"},
		// The same to a receiver that does not honour keys: not sent again.
		{"answered, not recorded, non-idempotent", "outbox-after-send", false, 1, 1, "uncertain"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startReceiver(t, tc.idempotent, nil)
			ps := newProcService(t, bin)
			ps.configure = func(c *config.Config) {
				c.Destinations = []config.Destination{procDestination("dest", r, tc.idempotent)}
				c.Outbox = config.Queue{Poll: 50 * time.Millisecond, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
			}
			p := ps.start(t, tc.failpoint)
			mid := "outbox-crash-" + string(rune('a'+i))
			order := p.createExternalOrder(t, mid, "dest")
			key := fulfillment.LineKey(order.GetId(), 1)
			if code, err := p.deliver(event(yolfi.TypePaymentConfirmed, mid, "inv_"+mid)); err == nil && code != http.StatusOK {
				t.Fatalf("webhook answered %d", code)
			}
			if st := p.waitExit(t, 20*time.Second); !daemon.Killed(st) {
				t.Fatalf("fulfillmentd exited with %v; want killed at %s", st, tc.failpoint)
			}
			if want := "failpoint: killing the process at " + tc.failpoint; !strings.Contains(p.output.String(), want) {
				t.Fatalf("fulfillmentd output lacks %q", want)
			}
			messages := p.count(t, "SELECT count(*) FROM outbox_messages WHERE order_id = $1", order.GetId())
			switch tc.failpoint {
			case "process-before-commit":
				if messages != 0 || r.Requests(key) != 0 {
					t.Fatalf("after the rollback: %d messages, %d requests; want none", messages, r.Requests(key))
				}
			default:
				if messages != 1 || r.Effects(key) != 1 || p.message(t, key) != "pending" {
					t.Fatalf("after the kill: %d messages (%s), %d effects; want 1 pending message, applied once",
						messages, p.message(t, key), r.Effects(key))
				}
			}

			p2 := ps.start(t, "")
			if tc.failpoint == "process-before-commit" {
				p2.sendOK(t, event(yolfi.TypePaymentConfirmed, mid, "inv_"+mid)) // redelivered by the provider
			}
			waitFor(t, "settled", func() bool { return p2.message(t, key) == tc.state })
			if n, e := r.Requests(key), r.Effects(key); n != tc.requests || e != tc.effects {
				t.Errorf("receiver: %d requests, %d effects under %s; want %d and %d", n, e, key, tc.requests, tc.effects)
			}
			if n := p2.count(t, "SELECT count(*) FROM outbox_messages WHERE order_id = $1", order.GetId()); n != 1 {
				t.Errorf("%d messages for the order, want 1", n)
			}
			wantState, wantItems := "fulfilled", 0
			if tc.state == "uncertain" {
				wantState, wantItems = "fulfilling", 1
			}
			if got := p2.effects(t, order.GetId()); got.State != wantState || got.Items["uncertain_delivery"] != wantItems {
				t.Errorf("order: %v; want %s with %d uncertain_delivery items", got, wantState, wantItems)
			}
		})
	}
}
