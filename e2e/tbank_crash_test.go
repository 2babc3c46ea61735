package e2e_test

// The T-Bank crash after the status write: a real fulfillmentd is killed
// with SIGKILL while it processes a CONFIRMED from the fake bank, right
// after (and, for contrast, right before) the transaction that writes the
// order's new state commits; a new process is started on the same data, the
// bank's retries and redeliveries reach it, and the order is granted once.
// And the crash right after a payment start re-drove the notifications that
// came before it.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

// procEnvTBankPassword holds tbankPassword for the child's T-Bank endpoints.
const procEnvTBankPassword = "E2E_TBANK_PASSWORD"

func TestTBankCrashAfterStatusWrite(t *testing.T) {
	t.Parallel()
	bin := procFailpointBuild.binary(t)
	cases := []struct {
		name, point string
		committed   bool // whether CONFIRMED's transaction committed before the kill
	}{
		{"after commit", "process-after-commit", true},
		{"before commit", "process-before-commit", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Two-stage, so that AUTHORIZED is processed before CONFIRMED
			// comes: CONFIRMED is the second arrival at the point. The bank
			// retries for longer than a restart takes.
			tp := newTBankProcs(t, bin, fakebank.Options{ConfirmLater: true, Retries: 400})
			p, s := tp.start(t, tc.point+":2")
			order := s.createRUBOrder(t, "tb-crash")
			pay := s.payStarted(t, order.GetId())
			if err := s.bank.Pay(pay); err != nil {
				t.Fatal(err)
			}
			s.waitBank(t)
			waitEventState(t, s.stack, tbankEventID(pay, tbank.StatusAuthorized), "processed")

			// The service's answers to CONFIRMED are lost until the
			// restart: the bank retries it, and only the new process can
			// acknowledge it.
			tp.relay.loseAnswers(true)
			if err := s.bank.Confirm(pay); err != nil {
				t.Fatal(err)
			}
			if st := p.waitExit(t, 20*time.Second); !daemon.Killed(st) {
				t.Fatalf("fulfillmentd exited with %v; want killed by SIGKILL at %s", st, tc.point)
			}
			if want := "failpoint: killing the process at " + tc.point; !strings.Contains(p.output.String(), want) {
				t.Fatalf("fulfillmentd output lacks %q: killed by something else", want)
			}

			// What the crash left behind: CONFIRMED is stored (the gateway
			// committed it before a worker could claim it), and processed
			// or not as its transaction committed or not.
			confirmed := tbankEventID(pay, tbank.StatusConfirmed)
			row := inboxEvent(t, s.stack, confirmed)
			want := orderCounts{State: "pending_payment", Attempts: 1, Inbox: map[string]int{"attempt_recorded": 1}}
			if tc.committed {
				if row.State != "processed" || row.Decision != "fulfilled" || row.Attempts != 1 || row.Leased {
					t.Fatalf("CONFIRMED: %v before the restart; want processed and fulfilled, claimed once, lease released", row)
				}
				want = orderCounts{State: "fulfilled", Licenses: 1, Attempts: 1,
					Inbox: map[string]int{"attempt_recorded": 1, "fulfilled": 1}, Published: map[string]int{"order.fulfilled": 1}}
			} else if !row.claimKilled() {
				t.Fatalf("CONFIRMED: %v before the restart; want pending, claimed once, its claim the dead worker's or freed", row)
			}
			if got := s.orderCounts(t, order.GetId()); !got.equal(want) {
				t.Fatalf("order after the kill: %v\nwant   %v", got, want)
			}

			// Restart. The bank's retries of what the dead process did not
			// acknowledge reach the new one; then the bank redelivers both
			// notifications, several times at once.
			p2, s2 := tp.start(t, "")
			tp.relay.loseAnswers(false)
			s2.waitBank(t)
			s2.settle(t)
			var bodies [][]byte
			for _, n := range s2.bank.Notifications() {
				if !n.Acked() {
					t.Errorf("%s never acknowledged: %+v", n.Status, n.Attempts)
				}
				if n.Status == tbank.StatusConfirmed && len(n.Attempts) < 2 {
					t.Errorf("CONFIRMED acknowledged at its first attempt, want retried: %+v", n.Attempts)
				}
				bodies = append(bodies, n.Body)
			}
			const copies = 4
			answers := make([]string, copies*len(bodies))
			race(len(answers), func(k int) {
				code, answer, err := s2.deliverTBank(bodies[k%len(bodies)])
				answers[k] = fmt.Sprintf("%d %s %v", code, answer, err)
			})
			for k, a := range answers {
				if a != "200 OK <nil>" {
					t.Errorf("redelivery %d answered %q, want 200 OK", k, a)
				}
			}
			s2.settle(t)

			want = orderCounts{State: "fulfilled", Licenses: 1, Attempts: 1,
				Inbox: map[string]int{"attempt_recorded": 1, "fulfilled": 1}, Published: map[string]int{"order.fulfilled": 1}}
			if got := s2.orderCounts(t, order.GetId()); !got.equal(want) {
				t.Errorf("order after the restart: %v\nwant   %v", got, want)
			}
			row = inboxEvent(t, s2.stack, confirmed)
			switch {
			case row.State != "processed" || row.Decision != "fulfilled":
				t.Errorf("CONFIRMED: %v; want processed and fulfilled", row)
			case tc.committed && row.Attempts != 1:
				t.Errorf("CONFIRMED: claimed %d times, want once: a committed event was processed again", row.Attempts)
			case !tc.committed && row.Attempts != 2:
				t.Errorf("CONFIRMED: claimed %d times, want twice (before the kill and after)", row.Attempts)
			}
			if n := s2.count(t, "SELECT count(*) FROM inbox_events"); n != 2 {
				t.Errorf("%d inbox rows, want 2", n)
			}
			if n := s2.count(t, "SELECT count(DISTINCT value) FROM entitlements"); n != 1 {
				t.Errorf("%d distinct license keys, want 1", n)
			}
			if !p2.running() {
				t.Errorf("the restarted fulfillmentd died: %v", p2.child.State())
			}
		})
	}
}

// tbankProcs runs fulfillmentd processes, one after the other on one
// database, with the T-Bank endpoints of a fake bank that notifies
// whichever process runs.
type tbankProcs struct {
	ps    *procService
	relay *tbankRelay
	bank  *fakebank.Bank
}

func newTBankProcs(t *testing.T, bin string, bankOpts fakebank.Options) *tbankProcs {
	t.Helper()
	tp := &tbankProcs{ps: newProcService(t, bin), relay: newTBankRelay(t)}
	tp.ps.queueOnly = true // (the inbox processor's failpoints)
	tp.bank = startFakeBank(t, bankOpts, tp.relay)
	endpoints := tbankEndpoints(t, tp.bank, tp.relay, config.Secret{Env: procEnvTBankPassword})
	tp.ps.configure = func(c *config.Config) {
		c.Endpoints = append(c.Endpoints, endpoints...)
		c.StatusPoll = config.StatusPoll{Queue: config.Queue{Disabled: true}}
	}
	return tp
}

// start starts a process (see procService.start), makes the bank's
// notifications go to it, and returns it with a tbankStack that talks to
// it.
func (tp *tbankProcs) start(t *testing.T, failpointSpec string) (*proc, *tbankStack) {
	t.Helper()
	p := tp.ps.start(t, failpointSpec, procEnvTBankPassword+"="+tbankPassword)
	tp.relay.forwardTo(t, p.ingestURL)
	return p, &tbankStack{stack: p.stack, bank: tp.bank}
}

// A T-Bank payment under the bank order id of the order's first attempt,
// made before StartPayment registered that attempt (as a checkout that
// called the bank itself would): its notifications are stored unmatched.
// StartPayment then registers the attempt, and the process is killed right
// after that transaction commits (SIGKILL at the failpoint
// start-after-create), before any worker processed the re-driven
// notifications: the registration and the re-drive committed together, so
// the restarted service applies the payment within seconds, once, and the
// bank's notifications sent again grant nothing more.
func TestLateStartMatchSurvivesACrash(t *testing.T) {
	t.Parallel()
	tp := newTBankProcs(t, procFailpointBuild.binary(t), fakebank.Options{})
	p, s := tp.start(t, "start-after-create")
	order := s.createRUBOrder(t, "tb-late-start")
	pay := s.payAtBank(t, fulfillment.ProviderOrderID(order.GetId(), 1), rubMinor)
	confirmed := tbankEventID(pay.PaymentID, tbank.StatusConfirmed)
	waitEventState(t, s.stack, confirmed, "unmatched")

	// The answer never comes: the process dies once the start committed.
	_, err := s.startPayment(order.GetId(), tbankFail, false)
	st := p.waitExit(t, 20*time.Second)
	if !daemon.Killed(st) || !strings.Contains(p.output.String(), "failpoint: killing the process at start-after-create") {
		t.Fatalf("fulfillmentd exited with %v (StartPayment: %v); want killed at start-after-create", st, err)
	}
	if n := s.count(t, "SELECT count(*) FROM payment_starts WHERE order_id = $1", order.GetId()); n != 1 {
		t.Fatalf("%d payment starts after the crash, want the one registered", n)
	}
	if row := inboxEvent(t, s.stack, confirmed); row.State == "unmatched" {
		t.Fatalf("CONFIRMED is %v after the crash: its re-drive did not commit with the start", row)
	}

	p2, s2 := tp.start(t, "")
	restarted := time.Now()
	took := s2.waitLicenses(t, order.GetId(), 1, restarted)
	t.Logf("applied %v after the restart", took.Round(time.Millisecond))
	for _, n := range s2.bank.Notifications() {
		if code, answer, err := s2.deliverTBank(n.Body); err != nil || code != http.StatusOK || answer != "OK" {
			t.Errorf("%s again: %d %q %v", n.Status, code, answer, err)
		}
	}
	s2.settle(t)
	if e := s2.effects(t, order.GetId()); e.Licenses != 1 || e.State != "fulfilled" {
		t.Errorf("after the restart and the notifications again: %v; want fulfilled, 1 license", e)
	}
	if n := s2.count(t, "SELECT count(*) FROM inbox_events WHERE state = 'unmatched'"); n != 0 {
		t.Errorf("%d events still unmatched, want none", n)
	}
	if resolved, open := s2.matchedLater(t, order.GetId()); resolved == 0 || open != 0 {
		t.Errorf("unmatched_payment items: %d resolved as matched_later with the order, %d open; want every one resolved", resolved, open)
	}
	if !p2.running() {
		t.Errorf("the restarted fulfillmentd died: %v", p2.child.State())
	}
}
