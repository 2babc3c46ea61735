package e2e_test

// Crash safety (acceptance scenario 2, a worker interrupted around the
// state change): a real fulfillmentd process is killed with SIGKILL at named
// points (and at an arbitrary moment), then a new process is started on the
// same database. Whatever was acknowledged is
// still there, and every order's effects exist exactly once.

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
)

// TestCrashAtFailpoint kills fulfillmentd at each failpoint while it
// processes a confirmed payment, restarts it, and redelivers: one fulfillment,
// one extra_payment item for the second payment, nothing twice.
func TestCrashAtFailpoint(t *testing.T) {
	t.Parallel()
	bin := procFailpointBuild.binary(t)
	cases := []struct {
		spec      string // FULFILLMENT_FAILPOINT
		point     string // the point it names
		crashOn   int    // which of the two confirmations is being processed at the kill
		committed bool   // whether that event's transaction committed before the kill
	}{
		// Leased, nothing processed: the dead worker's liveness lock is
		// gone, so a new worker processes the event at once (not after
		// the lease).
		{"after-claim", "after-claim", 0, false},
		// Order state changed and lines granted, not committed: PostgreSQL
		// rolls it all back when the connection dies.
		{"process-before-commit", "process-before-commit", 0, false},
		// Committed together with the event's decision: nothing is redone.
		{"process-after-commit", "process-after-commit", 0, true},
		// The second arrival: the extra payment of an already fulfilled order.
		{"process-before-commit:2", "process-before-commit", 1, false},
	}
	for i, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			t.Parallel()
			ps := newProcService(t, bin)
			ps.queueOnly = true
			p := ps.start(t, tc.spec)
			mid := fmt.Sprintf("crash-%d", i)
			order := p.createOrder(t, "live", mid)
			evs := []yolfi.Payload{
				event(yolfi.TypePaymentConfirmed, mid, "inv_"+mid+"_a"),
				event(yolfi.TypePaymentConfirmed, mid, "inv_"+mid+"_b"),
			}

			// Deliver up to the event whose processing is killed; each earlier
			// one is processed first, so that the n-th arrival is that event.
			for j := 0; j <= tc.crashOn; j++ {
				code, err := p.deliver(evs[j])
				switch {
				case err == nil && code == http.StatusOK:
				case err != nil && j == tc.crashOn:
					// The event is committed before a worker can claim it, but
					// the worker may claim, process and die before the gateway
					// has written the 200: the provider would redeliver.
					t.Logf("event %s: no acknowledgement, the process died while answering: %v", evs[j].ID, err)
				default:
					t.Fatalf("delivering event %d (%s): status %d, error %v; want 200", j, evs[j].ID, code, err)
				}
				if j < tc.crashOn {
					waitEventState(t, p.stack, evs[j].ID, "processed")
				}
			}
			st := p.waitExit(t, 20*time.Second)
			if !daemon.Killed(st) {
				t.Fatalf("fulfillmentd exited with %v; want killed by SIGKILL at %s", st, tc.point)
			}
			if want := "failpoint: killing the process at " + tc.point; !strings.Contains(p.output.String(), want) {
				t.Fatalf("fulfillmentd output lacks %q: killed by something else", want)
			}

			// What the crash left behind.
			crashed := evs[tc.crashOn]
			row := inboxEvent(t, p.stack, crashed.ID)
			if row.Attempts != 1 {
				t.Fatalf("killed event: attempts = %d before the restart, want 1 (claimed once)", row.Attempts)
			}
			if tc.committed {
				if row.State != "processed" || row.Leased {
					t.Fatalf("killed event: %v before the restart; want processed, lease released (committed before the kill)", row)
				}
			} else if !row.claimKilled() {
				t.Fatalf("killed event: %v before the restart; want pending, undecided, its claim the dead worker's or freed", row)
			}
			firstDone := tc.crashOn > 0 || tc.committed
			want := effects{State: "pending_payment", Items: map[string]int{}}
			if firstDone {
				want = effects{State: "fulfilled", Licenses: 2, Credits: 1, Attempts: 1, Items: map[string]int{}}
			}
			if tc.crashOn == 1 && tc.committed {
				want.Attempts, want.Items = 2, map[string]int{"extra_payment": 1}
			}
			if got := p.effects(t, order.GetId()); !sameEffects(got, want) {
				t.Fatalf("effects after the kill at %s: %v; want %v", tc.spec, got, want)
			}

			// Restart without the failpoint: the dead worker is no longer
			// live, so its event is reclaimed at once (the lease is 60s) and
			// processed again, or not at all.
			p2 := ps.start(t, "")
			p2.settle(t)
			row = inboxEvent(t, p2.stack, crashed.ID)
			if tc.committed && row.Attempts != 1 {
				t.Fatalf("killed event: attempts = %d after the restart, want 1: a committed event was processed again", row.Attempts)
			}
			if !tc.committed && row.Attempts < 2 {
				t.Fatalf("killed event: attempts = %d after the restart, want >= 2 (claimed before the kill and again after)", row.Attempts)
			}

			// Providers redeliver what may not have been acknowledged, and the
			// rest arrives: the killed event again, then everything.
			p2.sendOK(t, crashed)
			for _, ev := range evs {
				p2.sendOK(t, ev)
			}
			p2.settle(t)

			assertFulfilledOnce(t, p2.stack, order.GetId(), evs)
			for j, ev := range evs {
				if j != tc.crashOn {
					if r := inboxEvent(t, p2.stack, ev.ID); r.Attempts != 1 {
						t.Errorf("event %d (%s) was not killed: attempts = %d, want 1", j, ev.ID, r.Attempts)
					}
				}
			}
			// The same answer through the API.
			resp, err := p2.client.GetOrder(authed(adminToken), &fulfillmentv1.GetOrderRequest{OrderId: order.GetId()})
			if err != nil {
				t.Fatalf("GetOrder after the restart: %v", err)
			}
			if s := resp.GetOrder().GetState(); s != "fulfilled" {
				t.Errorf("GetOrder state = %q, want fulfilled", s)
			}
		})
	}
}

// TestCrashDecidingOnReceipt kills fulfillmentd inside the transaction
// that stores a confirmed payment and decides it (decide-before-commit),
// and just after its commit, before the 200 is written
// (decide-after-commit). Either way the provider got no acknowledgement
// and redelivers; after the restart the order is fulfilled once, whatever
// the first process had committed.
func TestCrashDecidingOnReceipt(t *testing.T) {
	t.Parallel()
	bin := procFailpointBuild.binary(t)
	for i, tc := range []struct {
		point     string
		committed bool
	}{{"decide-before-commit", false}, {"decide-after-commit", true}} {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			ps := newProcService(t, bin)
			p := ps.start(t, tc.point)
			mid := fmt.Sprintf("crash-receipt-%d", i)
			order := p.createOrder(t, "live", mid)
			ev := event(yolfi.TypePaymentConfirmed, mid, "inv_"+mid)
			if code, err := p.deliver(ev); err == nil {
				t.Fatalf("delivered with status %d; want no answer, the process killed at %s", code, tc.point)
			}
			if st := p.waitExit(t, 20*time.Second); !daemon.Killed(st) ||
				!strings.Contains(p.output.String(), "failpoint: killing the process at "+tc.point) {
				t.Fatalf("fulfillmentd exited with %v; want killed at %s", st, tc.point)
			}
			stored := p.count(t, "SELECT count(*) FROM inbox_events")
			queued := p.count(t, "SELECT count(*) FROM inbox_work")
			want := effects{State: "pending_payment", Items: map[string]int{}}
			if tc.committed {
				want = effects{State: "fulfilled", Licenses: 2, Credits: 1, Attempts: 1, Items: map[string]int{}}
			}
			if got := p.effects(t, order.GetId()); !sameEffects(got, want) || stored != map[bool]int{false: 0, true: 1}[tc.committed] || queued != 0 {
				t.Fatalf("after the kill at %s: %d events stored, %d queued, effects %v; want %v, nothing queued", tc.point, stored, queued, got, want)
			}
			if tc.committed {
				if row := inboxEvent(t, p.stack, ev.ID); row.State != "processed" || row.Attempts != 1 || row.Leased {
					t.Fatalf("the committed event is %+v; want processed on its one attempt", row)
				}
			}

			// The provider redelivers what was not acknowledged.
			p2 := ps.start(t, "")
			p2.sendOK(t, ev)
			p2.sendOK(t, ev)
			p2.settle(t)
			assertFulfilledOnce(t, p2.stack, order.GetId(), []yolfi.Payload{ev})
			if row := inboxEvent(t, p2.stack, ev.ID); row.State != "processed" || row.Attempts != 1 {
				t.Errorf("after the redeliveries the event is %+v; want processed once", row)
			}
		})
	}
}

// TestKillDuringConcurrentConfirmations SIGKILLs fulfillmentd (the
// production build, no failpoint) while twenty confirmations are being
// acknowledged, restarts it and redelivers every event, as providers do when
// they got no 200 (and sometimes when they did); kills it again while the
// workers process them (queued: inbox.queue_only; decided as they are
// stored, the default, nothing may be left to process by then), restarts
// and redelivers once more.
func TestKillDuringConcurrentConfirmations(t *testing.T) {
	t.Parallel()
	for _, queueOnly := range []bool{false, true} {
		t.Run(map[bool]string{false: "decided on receipt", true: "queued"}[queueOnly], func(t *testing.T) {
			t.Parallel()
			killDuringConcurrentConfirmations(t, queueOnly)
		})
	}
}

func killDuringConcurrentConfirmations(t *testing.T, queueOnly bool) {
	ps := newProcService(t, procPlainBuild.binary(t))
	ps.queueOnly = queueOnly
	p := ps.start(t, "")
	const n = 20
	orders := make([]string, n)
	evs := make([]yolfi.Payload, n)
	ids := make([]string, n)
	for i := range n {
		mid := fmt.Sprintf("kill-%02d", i)
		orders[i] = p.createOrder(t, "live", mid).GetId()
		evs[i] = event(yolfi.TypePaymentConfirmed, mid, "inv_"+mid)
		ids[i] = evs[i].ID
	}

	// Fire every confirmation at once; kill as soon as half are acknowledged,
	// with the rest in flight and processing under way.
	var (
		mu     sync.Mutex
		acked  []string
		failed []string
		half   = make(chan struct{})
		wg     sync.WaitGroup
		start  = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			code, err := p.deliver(evs[i])
			mu.Lock()
			defer mu.Unlock()
			if err == nil && code == http.StatusOK {
				acked = append(acked, evs[i].ID)
				if len(acked) == n/2 {
					close(half)
				}
				return
			}
			failed = append(failed, fmt.Sprintf("%s: status %d, error %v", evs[i].ID, code, err))
		})
	}
	close(start)
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-half:
	case <-allDone:
		select {
		case <-half: // closed together with the last answer
		default:
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("only %d of %d confirmations acknowledged, before any kill: %v", len(acked), n, failed)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("fewer than %d of %d confirmations acknowledged after 20s", n/2, n)
	}
	st := p.kill(t)
	<-allDone
	if !daemon.Killed(st) {
		t.Fatalf("fulfillmentd exited with %v; want killed by SIGKILL", st)
	}

	// Nothing acknowledged is lost.
	mu.Lock()
	nAcked, nFailed := len(acked), len(failed)
	ackedIDs := append([]string(nil), acked...)
	mu.Unlock()
	if got := p.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = ANY($1)", ackedIDs); got != nAcked {
		t.Fatalf("%d acknowledged events stored after the kill, want all %d", got, nAcked)
	}
	t.Logf("first kill: %d acknowledged, %d unanswered; inbox: %s", nAcked, nFailed, inboxSummary(t, p.stack))

	// Restart; every event is redelivered, concurrently. Kill again as soon
	// as a worker has committed one, with others leased or being processed
	// (at once when every event is processed already: the redeliveries
	// decided the unanswered ones as they stored them).
	const processed = "SELECT count(*) FROM inbox_events WHERE state = 'processed'"
	before := p.count(t, processed)
	p2 := ps.start(t, "")
	redeliverAll(t, p2, evs)
	deadline := time.Now().Add(20 * time.Second)
	for p2.count(t, processed) == before && before < n {
		if time.Now().After(deadline) {
			t.Fatalf("no event processed 20s after the restart; inbox: %s", inboxSummary(t, p2.stack))
		}
		time.Sleep(2 * time.Millisecond)
	}
	if st := p2.kill(t); !daemon.Killed(st) {
		t.Fatalf("fulfillmentd exited with %v; want killed by SIGKILL", st)
	}
	t.Logf("second kill: inbox: %s", inboxSummary(t, p2.stack))

	// Restart again; everything is redelivered once more.
	p3 := ps.start(t, "")
	redeliverAll(t, p3, evs)
	p3.settle(t)

	for i, id := range orders {
		assertFulfilledOnce(t, p3.stack, id, evs[i:i+1])
	}
	if got := p3.count(t, "SELECT count(*) FROM inbox_events"); got != n {
		t.Errorf("inbox rows = %d, want %d (one per event)", got, n)
	}
	if got := p3.count(t, "SELECT count(DISTINCT value) FROM entitlements"); got != 2*n {
		t.Errorf("distinct license keys = %d, want %d", got, 2*n)
	}
	if got := p3.count(t, "SELECT count(*) FROM ledger_entries"); got != n {
		t.Errorf("ledger rows = %d, want %d", got, n)
	}
}

// redeliverAll sends every event again, concurrently; each must get 200.
func redeliverAll(t *testing.T, p *proc, evs []yolfi.Payload) {
	t.Helper()
	errs := make([]error, len(evs))
	race(len(evs), func(i int) {
		code, err := p.deliver(evs[i])
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d", code)
		}
		errs[i] = err
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("redelivering event %d (%s): %v; want 200", i, evs[i].ID, err)
		}
	}
}

// inboxSummary counts the inbox by processing state.
func inboxSummary(t *testing.T, s *stack) string {
	t.Helper()
	return fmt.Sprintf("%d stored, %d pending (%d leased), %d processed",
		s.count(t, "SELECT count(*) FROM inbox_events"),
		s.count(t, "SELECT count(*) FROM inbox_events WHERE state = 'pending'"),
		s.count(t, "SELECT count(*) FROM inbox_work WHERE state = 'pending' AND lease_owner IS NOT NULL"),
		s.count(t, "SELECT count(*) FROM inbox_events WHERE state = 'processed'"))
}

// TestFailpointsInertWithoutTag: a build without the failpoints tag ignores
// FULFILLMENT_FAILPOINT — the mechanism is inert in production.
func TestFailpointsInertWithoutTag(t *testing.T) {
	t.Parallel()
	if failpoint.Enabled {
		t.Fatalf("internal/failpoint.Enabled = true in a test binary built without the failpoints tag")
	}
	plain, tagged := procPlainBuild.binary(t), procFailpointBuild.binary(t)
	for bin, want := range map[string]bool{plain: false, tagged: true} {
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		tags := ""
		for _, s := range info.Settings {
			if s.Key == "-tags" {
				tags = s.Value
			}
		}
		if got := strings.Contains(tags, "failpoints"); got != want {
			t.Fatalf("%s: build tags %q, want failpoints included = %v", bin, tags, want)
		}
	}

	ps := newProcService(t, plain)
	p := ps.start(t, "process-before-commit")
	order := p.createOrder(t, "live", "inert")
	ev := event(yolfi.TypePaymentConfirmed, "inert", "inv_inert")
	p.sendOK(t, ev)
	p.settle(t)
	if !p.running() {
		t.Fatalf("the production build died with FULFILLMENT_FAILPOINT set: %v", p.child.State())
	}
	assertFulfilledOnce(t, p.stack, order.GetId(), []yolfi.Payload{ev})
	if out := p.output.String(); strings.Contains(out, "failpoint") {
		t.Errorf("the production build mentions a failpoint in its output")
	}
	// And it shuts down cleanly on SIGTERM.
	if st := p.stop(t); !st.Success() {
		t.Errorf("after SIGTERM fulfillmentd exited with %v, want status 0", st)
	}
}

// assertFulfilledOnce checks an order paid by evs[0], with any further
// events being other confirmed payments: fulfilled once (two distinct
// licenses, one credit), one extra_payment item per extra payment, one inbox
// row per event, none failed.
func assertFulfilledOnce(t *testing.T, s *stack, orderID string, evs []yolfi.Payload) {
	t.Helper()
	want := effects{State: "fulfilled", Licenses: 2, Credits: 1, Attempts: len(evs), Items: map[string]int{}}
	if len(evs) > 1 {
		want.Items["extra_payment"] = len(evs) - 1
	}
	if got := s.effects(t, orderID); !sameEffects(got, want) {
		t.Fatalf("order %s: %v; want %v", orderID, got, want)
	}
	if got := s.count(t, "SELECT count(DISTINCT value) FROM entitlements WHERE order_id = $1", orderID); got != 2 {
		t.Fatalf("order %s: %d distinct license keys, want 2", orderID, got)
	}
	for j, ev := range evs {
		if got := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = $1", ev.ID); got != 1 {
			t.Fatalf("event %s stored %d times, want once", ev.ID, got)
		}
		wantDecision := "fulfilled"
		if j > 0 {
			wantDecision = "duplicate_payment"
		}
		if r := inboxEvent(t, s, ev.ID); r.State != "processed" || r.Decision != wantDecision {
			t.Fatalf("event %d (%s): %v; want processed with decision %s", j, ev.ID, r, wantDecision)
		}
	}
	if got := s.count(t, "SELECT count(*) FROM inbox_events WHERE state = 'failed'"); got != 0 {
		t.Fatalf("%d inbox events failed, want none", got)
	}
}

func sameEffects(a, b effects) bool {
	if a.State != b.State || a.Licenses != b.Licenses || a.Credits != b.Credits || a.Attempts != b.Attempts || len(a.Items) != len(b.Items) {
		return false
	}
	for k, v := range b.Items {
		if a.Items[k] != v {
			return false
		}
	}
	return true
}

// inboxRow is the processing state of one stored event.
type inboxRow struct {
	State, Decision string
	Attempts        int
	Leased          bool
	LastError       string // of its queued work, while it is queued
}

func (r inboxRow) String() string {
	return fmt.Sprintf("state=%s decision=%q attempts=%d leased=%v last_error=%q", r.State, r.Decision, r.Attempts, r.Leased, r.LastError)
}

// claimKilled reports whether r is what a worker killed while it held the
// event's first claim leaves behind: pending, undecided, claimed once, no
// failure recorded (a release would have handed the attempt back, a retry
// would have recorded an error). The row is usually still leased to the
// dead worker, but need not be: a reclaim the process sent just before it
// died can run after PostgreSQL has ended the dead process's liveness
// session, and then frees the claim of an owner that is indeed dead, as
// any replica's reclaim would (seen about once in a hundred runs on a
// loaded machine).
func (r inboxRow) claimKilled() bool {
	return r.State == "pending" && r.Decision == "" && r.Attempts == 1 && r.LastError == ""
}

// inboxEvent reads the one inbox row of a provider event id.
func inboxEvent(t *testing.T, s *stack, eventID string) inboxRow {
	t.Helper()
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = $1", eventID); n != 1 {
		t.Fatalf("event %s: %d inbox rows, want 1", eventID, n)
	}
	var r inboxRow
	err := s.db.QueryRow(context.Background(), `
		SELECT e.state, coalesce(e.decision, ''), coalesce(w.attempts, e.attempts), w.lease_owner IS NOT NULL, coalesce(w.last_error, '')
		FROM inbox_events e LEFT JOIN inbox_work w USING (id) WHERE e.event_id = $1`, eventID).Scan(&r.State, &r.Decision, &r.Attempts, &r.Leased, &r.LastError)
	if err != nil {
		t.Fatalf("reading inbox event %s: %v", eventID, err)
	}
	return r
}

// waitEventState waits until the event's inbox row is in state.
func waitEventState(t *testing.T, s *stack, eventID, state string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got string
		err := s.db.QueryRow(context.Background(), "SELECT state FROM inbox_events WHERE event_id = $1", eventID).Scan(&got)
		if err == nil && got == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("event %s: state %q (error %v) after 20s, want %s", eventID, got, err, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
