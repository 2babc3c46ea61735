package main

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	testreceiver "github.com/fulfillplatform/fulfillment/rig/receiver"
)

// openItems counts the open reconciliation items.
func (s *service) openItems(t *testing.T) int {
	t.Helper()
	resp, err := s.client.ListReconciliationItems(admin(t), &fulfillmentv1.ListReconciliationItemsRequest{State: "open"})
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.GetItems())
}

// buildCtl builds fulfillctl into a temporary folder and returns its path.
func buildCtl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fulfillctl")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building fulfillctl: %v\n%s", err, out)
	}
	return bin
}

// run runs the built binary against s, as the admin, and returns its
// stdout, stderr and exit code.
func (s *service) run(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, append([]string{"--addr", s.grpcAddr, "--token-file", s.tokenFile}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// A person sees that nothing needs them; then an order paid twice and a
// payment for no order: the summary counts them, the list shows them, get
// shows an item with its evidence, resolve records the resolution once.
// Events are listed, shown with their raw body and replayed. The built
// binary prints the same tables and JSON, and exits 1 with one line on a
// refusal.
func TestReconAndEventsCommands(t *testing.T) {
	t.Parallel()
	s := startService(t)
	bin := buildCtl(t)

	// Nothing yet: each listing says so.
	if out := s.ctlOK(t, "recon", "summary"); !strings.HasPrefix(out, "no org and environment pairs match (nothing needs a person: ") {
		t.Errorf("empty summary: %q", out)
	}
	if out := s.ctlOK(t, "recon", "list"); out != "no reconciliation items match\n" {
		t.Errorf("empty list: %q", out)
	}
	if out, errOut, code := s.run(t, bin, "events", "list"); out != "no events match\n" || errOut != "" || code != 0 {
		t.Errorf("empty events list: %q %q exit %d", out, errOut, code)
	}

	// One at a time, so that the first payment pays the order and the
	// items are opened in this order.
	order := s.payOrder(t, "ctl-recon-1")
	waitUntil(t, "the order fulfilled", func() bool {
		o, err := s.client.GetOrder(admin(t), &fulfillmentv1.GetOrderRequest{OrderId: order})
		return err == nil && o.GetOrder().GetState() == "fulfilled"
	})
	extraEvent := s.sendPayment(t, "ctl-recon-1", "inv_pay_second", "pay_second")
	waitUntil(t, "an item open", func() bool { return s.openItems(t) == 1 })
	s.sendPayment(t, "ctl-recon-nobody", "inv_pay_nobody", "pay_nobody")
	waitUntil(t, "two items open", func() bool { return s.openItems(t) == 2 })

	wantMatches(t, "recon summary", s.ctlOK(t, "recon", "summary"),
		`\AORG +ENV +OPEN +OLDEST OPEN +EVENTS PENDING +EVENTS FAILED +PAID NOT FULFILLED +OUTBOX FAILED +OUTBOX UNCERTAIN +OPEN BY KIND\n`+
			`org_a +live +2 +\d+(\.\d+)?[a-z]+ +0 +0 +0 +0 +0 +unmatched_payment=1 extra_payment=1\n\z`)
	sum := fromJSON(t, s.ctlOK(t, "recon", "summary", "--org", svcOrg, "--json"), &fulfillmentv1.GetReconciliationSummaryResponse{})
	if len(sum.GetSummaries()) != 1 || sum.GetSummaries()[0].GetOpenItems() != 2 {
		t.Errorf("recon summary --json: %v", sum)
	}

	// Activity: three payments stored, one order fulfilled, in the window.
	act := s.ctlOK(t, "recon", "activity", "--minutes", "5")
	if rows := strings.Split(strings.TrimSuffix(act, "\n"), "\n"); len(rows) != 8 ||
		!regexp.MustCompile(`^MINUTE +EVENTS +FULFILLED +DELIVERED$`).MatchString(rows[0]) ||
		!regexp.MustCompile(`^total +3 +1 +0$`).MatchString(rows[7]) {
		t.Errorf("recon activity --minutes 5:\n%s", act)
	}
	_, _, err := s.ctl(t, "recon", "activity", "--minutes", "181")
	wantAPIError(t, err, codes.InvalidArgument, "INVALID_ARGUMENT: minutes: must be between 1 and 180")

	out := s.ctlOK(t, "recon", "list")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^ID +KIND +STATE +ORG +ENV +ORDER +EVENT +AMOUNT +CREATED +DETAIL$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^\d+ +unmatched_payment +open +org_a +live +- +evt_\S+ +25 USDT/TRON +`+timeRE+` +no order matches`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^\d+ +extra_payment +open +org_a +live +`+order+` +`+extraEvent+` +25 USDT/TRON \(expected 25\) +`+timeRE+
			` +the order was already paid by payment pay_ctl-recon-1 `).MatchString(lines[2]) {
		t.Fatalf("recon list:\n%s", out)
	}
	list := fromJSON(t, s.ctlOK(t, "recon", "list", "--kind", "extra_payment", "--from", "1h", "--json"), &fulfillmentv1.ListReconciliationItemsResponse{})
	if len(list.GetItems()) != 1 || list.GetItems()[0].GetOrderId() != order {
		t.Fatalf("recon list --kind extra_payment --json: %v", list)
	}
	id := list.GetItems()[0].GetId()
	if out := s.ctlOK(t, "recon", "list", "--before", "1h"); out != "no reconciliation items match\n" {
		t.Errorf("items opened over an hour ago: %q", out)
	}
	if _, _, err := s.ctl(t, "recon", "list", "--from", "yesterday"); err == nil || !strings.Contains(err.Error(), `--from "yesterday": want an RFC 3339 time`) {
		t.Errorf("a bad --from: %v", err)
	}

	wantMatches(t, "recon get", s.ctlOK(t, "recon", "get", id),
		`(?m)^kind +extra_payment$`, `(?m)^state +open$`, `(?m)^event +`+extraEvent+`$`, `(?m)^resolution +-$`,
		`(?m)^order `+order+` \(fulfilled\), org_a live, merchant order ctl-recon-1:$`,
		`(?m)^order events \(2, 0 older not shown\):$`, `(?m)^`+extraEvent+` +payment\.confirmed +`+timeRE+` +duplicate_payment$`,
		`(?m)^stored event \d+:$`, `(?m)^decision +duplicate_payment$`, `(?m)^payment +pay_second$`)
	got := fromJSON(t, s.ctlOK(t, "recon", "get", id, "--json"), &fulfillmentv1.GetReconciliationItemResponse{})
	if got.GetEvidence().GetOrder().GetId() != order || got.GetEvidence().GetEvent().GetEventId() != extraEvent {
		t.Errorf("recon get --json: %v", got)
	}

	// Resolve, once.
	out, errOut, err := s.ctl(t, "recon", "resolve", id, "--resolution", "refunded", "--note", "refunded pay_second at Yolfi", "--actor-detail", "Dana")
	if err != nil || errOut != "item "+id+" is resolved as refunded by admin\n" {
		t.Fatalf("recon resolve: %v, stderr %q", err, errOut)
	}
	wantMatches(t, "recon resolve", out, `(?m)^state +resolved$`, `(?m)^resolution +refunded$`,
		`(?m)^resolved by +admin \(Dana\)$`, `(?m)^note +refunded pay_second at Yolfi$`, `(?m)^resolved +`+timeRE+`$`)
	_, _, err = s.ctl(t, "recon", "resolve", id, "--resolution", "no_action", "--note", "again")
	wantAPIError(t, err, codes.FailedPrecondition, "FAILED_PRECONDITION: reconciliation item "+id+" was resolved as refunded at ")
	stdout, stderr, code := s.run(t, bin, "recon", "resolve", id, "--resolution", "no_action", "--note", "again")
	if code != 1 || stdout != "" || !regexp.MustCompile(`\Afulfillctl: FAILED_PRECONDITION: reconciliation item `+id+
		` was resolved as refunded at `+timeRE+` by admin; its resolution is kept\n\z`).MatchString(stderr) {
		t.Errorf("binary, resolving twice: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, _, err := s.ctl(t, "recon", "resolve", id, "--resolution", "refunded"); err == nil || !strings.Contains(err.Error(), `"note" not set`) {
		t.Errorf("resolve without --note: %v", err)
	}
	_, _, err = s.ctl(t, "recon", "resolve", id, "--resolution", "fixed", "--note", "x")
	wantAPIError(t, err, codes.InvalidArgument, "INVALID_ARGUMENT: resolution: must be one of")
	if _, stderr, code := s.run(t, bin, "recon", "get", "abc"); code != 1 || !strings.HasPrefix(stderr, "fulfillctl: INVALID_ARGUMENT: item_id: ") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("binary, a bad id: exit %d, stderr %q", code, stderr)
	}
	if out, _, code := s.run(t, bin, "recon", "list", "--state", "open", "--json"); code != 0 ||
		len(fromJSON(t, out, &fulfillmentv1.ListReconciliationItemsResponse{}).GetItems()) != 1 {
		t.Errorf("binary, open items as JSON: exit %d\n%s", code, out)
	}
	if out, _, code := s.run(t, bin, "recon", "resolve", "--help"); code != 0 || !strings.Contains(out, "Examples:\n  fulfillctl recon get 42") {
		t.Errorf("binary, resolve --help: exit %d\n%s", code, out)
	}

	// Events: listed (the table, by order), shown with the raw body,
	// replayed, decided again without a second effect.
	stdout, _, code = s.run(t, bin, "events", "list")
	lines = strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if code != 0 || len(lines) != 4 || !regexp.MustCompile(`^ID +STATE +DECISION +TYPE +EVENT +ORG +ENDPOINT +ORDER +RECEIVED +ATTEMPTS +REPLAYS$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^\d+ +unmatched +unmatched +payment\.confirmed +evt_\S+ +org_a +yolfi-live +- +`+timeRE+` +1 +0$`).MatchString(lines[1]) {
		t.Fatalf("binary, events list: exit %d\n%s", code, stdout)
	}
	evs := fromJSON(t, s.ctlOK(t, "events", "list", "--order", order, "--json"), &fulfillmentv1.ListInboxEventsResponse{})
	if len(evs.GetEvents()) != 2 || evs.GetEvents()[0].GetEventId() != extraEvent {
		t.Fatalf("events list --order: %v", evs)
	}
	paid := evs.GetEvents()[1]
	wantMatches(t, "events get", s.ctlOK(t, "events", "get", paid.GetId()),
		`(?m)^id +`+paid.GetId()+`$`, `(?m)^decision +fulfilled$`, `(?m)^state +processed$`, `(?m)^order +`+order+`$`,
		`(?m)^amount +25 USDT/TRON$`, `(?m)^replays +0$`, `(?m)^raw body:\n\{\n(  .*\n)*  "type": "payment\.confirmed",$`)
	out, errOut, err = s.ctl(t, "events", "replay", paid.GetId(), "--actor-detail", "ticket 9")
	if err != nil || errOut != "event "+paid.GetId()+" is pending again (replay 1): the processor decides it again against the current state\n" {
		t.Fatalf("events replay: %v, stderr %q", err, errOut)
	}
	wantMatches(t, "events replay", out, `(?m)^replays \(newest first, 1 of 1\):\nREPLAYED .*\n`+timeRE+` +admin +ticket 9 +processed +fulfilled +1 +-$`)
	waitUntil(t, "the replayed event decided again", func() bool {
		resp, err := s.client.GetInboxEvent(admin(t), &fulfillmentv1.GetInboxEventRequest{InboxEventId: paid.GetId()})
		return err == nil && resp.GetEvent().GetState() == "processed"
	})
	wantMatches(t, "events get after the replay", s.ctlOK(t, "events", "get", paid.GetId()), `(?m)^decision +fulfilled$`, `(?m)^replays +1$`)
	o, err := s.client.GetOrder(admin(t), &fulfillmentv1.GetOrderRequest{OrderId: order})
	if err != nil || o.GetOrder().GetState() != "fulfilled" || len(o.GetOrder().GetHistory().GetEntitlements()) != 1 {
		t.Errorf("the order after the replay: %v, %v", o, err)
	}
	if _, stderr, code := s.run(t, bin, "events", "replay", "999999"); code != 1 || stderr != "fulfillctl: NOT_FOUND: stored event 999999\n" {
		t.Errorf("binary, replaying an unknown event: exit %d, stderr %q", code, stderr)
	}
	// Replaying the payment for no order: the note says what happens to its
	// items once the event is decided.
	unmatched := strings.Fields(lines[1])[0]
	_, errOut, err = s.ctl(t, "events", "replay", unmatched)
	if err != nil || errOut != "event "+unmatched+" is pending again (replay 1): the processor decides it again against the current state; "+
		"an unmatched_payment item of it is resolved once it matches (events get "+unmatched+")\n" {
		t.Errorf("events replay of an unmatched payment: %v, stderr %q", err, errOut)
	}

	// orders get by the merchant's order id.
	byRef := fromJSON(t, s.ctlOK(t, "orders", "get", "--org", svcOrg, "--merchant-order-id", "ctl-recon-1", "--json"), &fulfillmentv1.Order{})
	if byRef.GetId() != order || byRef.GetHistory() == nil {
		t.Errorf("orders get --merchant-order-id: %v", byRef)
	}
	if _, _, err := s.ctl(t, "orders", "get", "--org", svcOrg, "--merchant-order-id", "nope"); err == nil ||
		!strings.HasPrefix(err.Error(), `no order of org org_a has merchant order id "nope": check the id`) {
		t.Errorf("orders get of an unknown merchant order id: %v", err)
	}
	if _, _, err := s.ctl(t, "orders", "get"); err == nil || !strings.Contains(err.Error(), "give an order id, or --org with --merchant-order-id") {
		t.Errorf("orders get without an id: %v", err)
	}
}

// An order with a license and an external line, paid, its message
// delivered; then its payment event replayed 10 times through the running
// service's inbox worker: the order's licenses, ledger, events, deliveries
// and items, and what the destination applied, are unchanged.
func TestReplayTenTimesThroughTheWorker(t *testing.T) {
	t.Parallel()
	key := parseSecret(t, testSecret(61))
	crm := testreceiver.Start(t, testreceiver.Options{Secrets: []stdwebhooks.Secret{key}})
	yes := true
	s := startService(t, config.Destination{ID: "crm", URL: crm.URL(), Idempotent: &yes, Keys: []stdwebhooks.Secret{key}}.WithDefaults())
	order := s.payOrder(t, "ctl-replay-1", "crm")
	snapshot := func() string {
		t.Helper()
		o, err := s.client.GetOrder(admin(t), &fulfillmentv1.GetOrderRequest{OrderId: order})
		if err != nil {
			t.Fatal(err)
		}
		h := o.GetOrder().GetHistory()
		items, err := s.client.ListReconciliationItems(admin(t), &fulfillmentv1.ListReconciliationItemsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var delivered int
		for _, d := range h.GetDeliveries() {
			if d.GetState() == "delivered" {
				delivered++
			}
		}
		return fmt.Sprintf("state=%s licenses=%d ledger=%d events=%d deliveries=%d delivered=%d items=%d effects=%d",
			o.GetOrder().GetState(), len(h.GetEntitlements()), len(h.GetLedgerEntries()), len(h.GetEvents()),
			len(h.GetDeliveries()), delivered, len(items.GetItems()), crm.Effects(fulfillment.LineKey(order, 1)))
	}
	want := "state=fulfilled licenses=1 ledger=0 events=1 deliveries=1 delivered=1 items=0 effects=1"
	waitUntil(t, "fulfilled and delivered", func() bool { return snapshot() == want })
	evs, err := s.client.ListInboxEvents(admin(t), &fulfillmentv1.ListInboxEventsRequest{OrderId: order})
	if err != nil || len(evs.GetEvents()) != 1 {
		t.Fatalf("the order's events: %v, %v", evs, err)
	}
	id := evs.GetEvents()[0].GetId()
	for i := range 10 {
		s.ctlOK(t, "events", "replay", id)
		waitUntil(t, "the replay decided", func() bool {
			e, err := s.client.GetInboxEvent(admin(t), &fulfillmentv1.GetInboxEventRequest{InboxEventId: id})
			return err == nil && e.GetEvent().GetState() == "processed" && e.GetEvent().GetReplayCount() == int32(i+1)
		})
		if got := snapshot(); got != want {
			t.Fatalf("after replay %d: %s, want %s", i+1, got, want)
		}
	}
	e, err := s.client.GetInboxEvent(admin(t), &fulfillmentv1.GetInboxEventRequest{InboxEventId: id})
	if err != nil || e.GetEvent().GetDecision() != "fulfilled" || e.GetEvent().GetReplayCount() != 10 || len(e.GetEvent().GetReplays()) != 10 {
		t.Errorf("the event after 10 replays: %v, %v", e, err)
	}
}

// The replay's note names only the items the event has: an unmatched_payment
// item for a confirmed payment decided unmatched, none for another event
// decided unmatched (a refund, an attempt), failed_event items for a failed
// one.
func TestReplayNoteNamesTheEventsItems(t *testing.T) {
	t.Parallel()
	const pending = "event 7 is pending again (replay 1): the processor decides it again against the current state"
	for _, c := range []struct{ kind, previous, want string }{
		{"payment_confirmed", "unmatched", pending + "; an unmatched_payment item of it is resolved once it matches (events get 7)"},
		{"refunded", "unmatched", pending},
		{"attempt_created", "unmatched", pending},
		{"refunded", "failed", pending + "; its failed_event items are resolved once it is decided (events get 7)"},
		{"payment_confirmed", "processed", pending},
	} {
		e := &fulfillmentv1.InboxEvent{Id: "7", Kind: c.kind, ReplayCount: 1,
			Replays: []*fulfillmentv1.EventReplay{{PreviousState: c.previous}}}
		if got := replayNote(e); got != c.want {
			t.Errorf("%s, %s before: %q, want %q", c.kind, c.previous, got, c.want)
		}
	}
}
