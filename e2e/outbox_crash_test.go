package e2e_test

// The outbox across crashes of a real fulfillmentd process: a message whose
// causing transaction was rolled back does not exist; one whose delivery was
// answered but not recorded is sent again under the same key — which an
// idempotent receiver applies once — and never again to a receiver that
// does not honour keys. A batch of messages claimed together by a worker of
// an idempotent destination and killed between its sends and their one
// record is sent again, every message of it, and applied once.

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
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
			ps.queueOnly = strings.HasPrefix(tc.failpoint, "process-") // (the inbox processor's transaction)
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

// TestOutboxCrashBatch kills the process between the sends of one claim and
// its record: several messages are due together before the dispatcher
// starts, the receiver answers the first killAfter of them, and the process
// dies before recording any. A fresh process then takes over. The
// assertions count (requests and effects per key at the receiver, rows in
// the database); none reads a state column, only the wait for the restart
// to settle does. The database is the test's own, so whole tables are
// counted: nothing unexpected hides elsewhere.
func TestOutboxCrashBatch(t *testing.T) {
	t.Parallel()
	bin := procFailpointBuild.binary(t)
	const (
		// orders are paid before the dispatcher starts, one external line
		// (one message) each: fewer than a claim of an idempotent
		// destination takes (idempotentBatch, 8), so that one claim takes
		// them all.
		orders = 5
		// killAfter is the send after which the process is killed: at
		// least 2, so that more than one answered message is unrecorded,
		// and fewer than orders, so that some were never sent.
		killAfter = 3
	)
	cases := []struct {
		name       string
		idempotent bool
		// At the kill: the messages leased to the dead process, and the
		// attempts it recorded.
		leased, recorded int
		// resent is how many more requests each key answered before the
		// kill gets from the next process; uncertain is how many messages
		// end uncertain (an item each, their orders not fulfilled).
		resent, uncertain int
	}{
		// One claim of all the messages, none recorded: the next process
		// sends the killAfter answered ones again under their keys, which
		// the receiver applies once. That resend is the cost of the batch.
		{"idempotent", true, orders, 0, 1, 0},
		// The cheap twin: one message per claim, recorded before the next
		// claim, so only the one on the wire at the kill is unrecorded; it
		// is not sent again but left to an operator.
		{"non-idempotent", false, 1, killAfter - 1, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The messages are due before the killed process starts, so its
			// dispatcher may send them before the process answers its
			// readiness check, and die before start has seen it serve. The
			// receiver holds every request until the gate opens, after
			// start returned. The cleanup opens it too (before the receiver
			// closes, cleanups run last first), so that a failed test never
			// leaves a request held.
			gate := make(chan struct{})
			openGate := sync.OnceFunc(func() { close(gate) })
			r := startReceiver(t, tc.idempotent, func(string, int) receiver.Action {
				<-gate
				return receiver.Action{}
			})
			t.Cleanup(openGate)
			ps := newProcService(t, bin)
			paused := true
			ps.configure = func(c *config.Config) {
				d := procDestination("dest", r, tc.idempotent)
				// One worker: its first claim takes every due message, none
				// is left for a concurrent claim to split the batch.
				d.Concurrency = 1
				// A request held at the gate must not time out: start gives
				// up on a process not ready within 20s.
				d.Timeout = 30 * time.Second
				c.Destinations = []config.Destination{d}
				// A paused process runs no dispatcher: its messages wait
				// in the table until one that runs it starts.
				c.Outbox = config.Queue{Disabled: paused, Poll: 50 * time.Millisecond,
					BaseBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
			}

			p0 := ps.start(t, "")
			ids, keys := make([]string, orders), make([]string, orders)
			for i := range orders {
				mid := fmt.Sprintf("outbox-batch-%d", i)
				ids[i] = p0.createExternalOrder(t, mid, "dest").GetId()
				keys[i] = fulfillment.LineKey(ids[i], 1)
				p0.pay(t, mid)
			}
			// The payments' transactions write the messages: once they are
			// all there, the paused process has nothing left to do.
			waitFor(t, "queued", func() bool { return p0.count(t, "SELECT count(*) FROM outbox_messages") == orders })
			p0.stop(t)
			requests := func() (n int) {
				for _, k := range keys {
					n += r.Requests(k)
				}
				return n
			}
			if n := requests(); n != 0 {
				t.Fatalf("%d requests while the dispatcher was paused, want none", n)
			}

			paused = false
			p1 := ps.start(t, fmt.Sprintf("outbox-after-send:%d", killAfter))
			openGate()
			if st := p1.waitExit(t, 20*time.Second); !daemon.Killed(st) {
				t.Fatalf("fulfillmentd exited with %v; want killed after send %d", st, killAfter)
			}
			if want := "failpoint: killing the process at outbox-after-send"; !strings.Contains(p1.output.String(), want) {
				t.Fatalf("fulfillmentd output lacks %q", want)
			}
			// The failpoint fires after the receiver answered: what it
			// counted now is final for the dead process.
			sent := map[string]bool{}
			for _, k := range keys {
				switch n, e := r.Requests(k), r.Effects(k); {
				case n == 1 && e == 1:
					sent[k] = true
				case n != 0 || e != 0:
					t.Errorf("before the kill: %d requests, %d effects under %s; want 1 and 1, or none", n, e, k)
				}
			}
			if len(sent) != killAfter {
				t.Errorf("before the kill: %d messages sent, want %d", len(sent), killAfter)
			}
			// Each recorded delivery completes its order (one line to
			// deliver), so as many orders are fulfilled as attempts were
			// recorded. The messages leased to the dead process are the
			// queued ones whose claim counted an attempt (recording one
			// deletes its row), not those with an owner: the owner is dead,
			// so any reclaim may free them from now on — even one the process
			// sent just before the kill, which PostgreSQL runs to its end
			// after the process's liveness session is gone. A reclaim keeps
			// the attempts counted.
			leased := p1.count(t, "SELECT count(*) FROM outbox_work WHERE attempts > 0")
			recorded := p1.count(t, "SELECT count(*) FROM outbox_attempts")
			fulfilled := p1.count(t, "SELECT count(*) FROM order_events WHERE topic = $1", string(fulfillment.TopicOrderFulfilled))
			if leased != tc.leased || recorded != tc.recorded || fulfilled != tc.recorded {
				t.Fatalf("at the kill: %d messages leased, %d attempts recorded, %d orders fulfilled; want %d, %d and %d",
					leased, recorded, fulfilled, tc.leased, tc.recorded, tc.recorded)
			}

			p2 := ps.start(t, "")
			// A message leaves pending in the transaction recording its
			// attempt, after its request was answered: once none is left,
			// the receiver's counts are final too. A message still pending
			// after 30s is reported, and the counts below then say what
			// is missing.
			pending := func() int { return p2.count(t, "SELECT count(*) FROM outbox_messages WHERE state = 'pending'") }
			for deadline := time.Now().Add(30 * time.Second); pending() > 0 && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			if n := pending(); n != 0 {
				t.Errorf("%d messages still pending 30s after the restart, want none", n)
			}
			for _, k := range keys {
				want := 1
				if sent[k] {
					want += tc.resent
				}
				if n, e := r.Requests(k), r.Effects(k); n != want || e != 1 {
					t.Errorf("receiver: %d requests, %d effects under %s (sent before the kill: %v); want %d and 1", n, e, k, sent[k], want)
				}
			}
			if n, want := requests(), orders+killAfter*tc.resent; n != want {
				t.Errorf("receiver: %d requests in all, want %d", n, want)
			}
			// One message per order, and one recorded attempt per message:
			// the dead process's sends left no row.
			if n := p2.count(t, "SELECT count(*) FROM outbox_messages"); n != orders {
				t.Errorf("%d messages, want %d", n, orders)
			}
			if n := p2.count(t, "SELECT count(*) FROM outbox_attempts"); n != orders {
				t.Errorf("%d attempts recorded, want %d", n, orders)
			}
			// Each order is fulfilled once or, with its message uncertain,
			// has one uncertain_delivery item instead; never both, never
			// neither, and no item of another kind (len(Items) counts the
			// kinds). Its license was granted once, at payment.
			var fulfilledOrders, uncertain int
			for _, id := range ids {
				f := p2.count(t, "SELECT count(*) FROM order_events WHERE order_id = $1 AND topic = $2", id, string(fulfillment.TopicOrderFulfilled))
				got := p2.effects(t, id)
				u := got.Items["uncertain_delivery"]
				if f+u != 1 || len(got.Items) != u || got.Licenses != 1 {
					t.Errorf("order %s: fulfilled %d times; %v; want fulfilled once or one uncertain_delivery item, and its license", id, f, got)
				}
				fulfilledOrders, uncertain = fulfilledOrders+f, uncertain+u
			}
			if fulfilledOrders != orders-tc.uncertain || uncertain != tc.uncertain {
				t.Errorf("%d orders fulfilled, %d uncertain_delivery items; want %d and %d",
					fulfilledOrders, uncertain, orders-tc.uncertain, tc.uncertain)
			}
			if n := p2.count(t, "SELECT count(*) FROM reconciliation_items"); n != tc.uncertain {
				t.Errorf("%d reconciliation items, want %d", n, tc.uncertain)
			}
		})
	}
}
