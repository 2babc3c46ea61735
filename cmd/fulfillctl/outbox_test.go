package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	testreceiver "github.com/fulfillplatform/fulfillment/rig/receiver"
)

// fromJSON decodes what a --json command printed into m.
func fromJSON[M proto.Message](t *testing.T, out string, m M) M {
	t.Helper()
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return m
}

// messageState reads the state of message id.
func (s *service) messageState(t *testing.T, id string) string {
	t.Helper()
	resp, err := s.client.GetOutboxMessage(admin(t), &fulfillmentv1.GetOutboxMessageRequest{MessageId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetMessage().GetState()
}

// wantAPIError checks that fulfillctl failed with a gRPC status of code,
// shown as one line "CODE: message" starting with want.
func wantAPIError(t *testing.T, err error, code codes.Code, want string) {
	t.Helper()
	if status.Code(err) != code || err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %v (%v), want %v starting with %q, on one line", err, status.Code(err), code, want)
	}
}

// countMessages counts the messages in state.
func (s *service) countMessages(t *testing.T, state string) int {
	t.Helper()
	resp, err := s.client.ListOutboxMessages(admin(t), &fulfillmentv1.ListOutboxMessagesRequest{State: state})
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.GetMessages())
}

// wantMatches checks that out matches every pattern.
func wantMatches(t *testing.T, what, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Errorf("%s: no match for %s in\n%s", what, p, out)
		}
	}
}

// Timestamps and durations as the tables show them.
const (
	timeRE = `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`
	tookRE = `\d\S*s`
)

// A person finds uncertain and failed messages, reads them with their
// attempts, retries the failed one; pages through the list; stops and
// resumes a destination.
func TestOutboxAndDestinationCommands(t *testing.T) {
	t.Parallel()
	key := parseSecret(t, testSecret(60))
	keys := []stdwebhooks.Secret{key}
	// crm does not honour idempotency keys and answers the first request of
	// every message 500: each message is then uncertain.
	crm := testreceiver.Start(t, testreceiver.Options{Secrets: keys, Plan: testreceiver.FailFirst(1, 500)})
	// erp honours them and refuses the first two requests of every message
	// with 400: with two attempts allowed, each message fails.
	erp := testreceiver.Start(t, testreceiver.Options{Secrets: keys, Plan: testreceiver.FailFirst(2, 400)})
	yes, no := true, false
	s := startService(t,
		config.Destination{ID: "crm", URL: crm.URL(), Idempotent: &no, Keys: keys}.WithDefaults(),
		config.Destination{ID: "erp", URL: erp.URL(), Idempotent: &yes, MaxAttempts: 2, Keys: keys}.WithDefaults())
	var orders []string // each with a crm line
	for i := range 3 {
		orders = append(orders, s.payOrder(t, fmt.Sprintf("ctl-outbox-%d", i), "crm"))
	}
	erpOrder := s.payOrder(t, "ctl-outbox-erp", "erp")
	waitUntil(t, "three messages uncertain and one failed", func() bool {
		return s.countMessages(t, "uncertain") == 3 && s.countMessages(t, "failed") == 1
	})

	// crm's messages, as a table, newest first.
	lines := strings.Split(strings.TrimSuffix(s.ctlOK(t, "outbox", "list", "--destination", "crm"), "\n"), "\n")
	if len(lines) != 4 || !regexp.MustCompile(`^ID +STATE +ATTEMPTS +DESTINATION +TOPIC +ORDER +LINE +ORG +ENV +CREATED +LAST ERROR$`).MatchString(lines[0]) {
		t.Fatalf("outbox list --destination crm:\n%s", strings.Join(lines, "\n"))
	}
	row := regexp.MustCompile(`^(\d+) +uncertain +1 +crm +fulfillment\.requested +(\S+) +1 +org_a +live +` + timeRE + ` +HTTP 500$`)
	var listed []string           // the orders of the messages, as listed
	messageOf := map[string]int{} // by order id
	for i, line := range lines[1:] {
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("row %d:\n%s", i, line)
		}
		id, _ := strconv.Atoi(m[1])
		if i > 0 && id >= messageOf[listed[i-1]] {
			t.Errorf("row %d: message %d listed after %s, not newest first", i, id, listed[i-1])
		}
		listed = append(listed, m[2])
		messageOf[m[2]] = id
	}
	var ids []string // the messages of orders[0], [1], [2]
	for _, o := range orders {
		if messageOf[o] == 0 {
			t.Fatalf("no message listed for order %s", o)
		}
		ids = append(ids, strconv.Itoa(messageOf[o]))
	}
	// erp's, by state.
	out := s.ctlOK(t, "outbox", "list", "--state", "failed")
	failed := regexp.MustCompile(`\A.*\n(\d+) +failed +2 +erp +fulfillment\.requested +` + erpOrder + ` +1 +org_a +live +` + timeRE + ` +HTTP 400\n\z`).
		FindStringSubmatch(out)
	if failed == nil {
		t.Fatalf("outbox list --state failed, want erp's message alone:\n%s", out)
	}
	failedID := failed[1]
	if all := fromJSON(t, s.ctlOK(t, "outbox", "list", "--limit", "0", "--json"), &fulfillmentv1.ListOutboxMessagesResponse{}); len(all.GetMessages()) != 4 || all.GetNextPageToken() != "" {
		t.Errorf("outbox list --limit 0: %d messages, token %q; want all 4", len(all.GetMessages()), all.GetNextPageToken())
	}
	if got := fromJSON(t, s.ctlOK(t, "outbox", "list", "--order", orders[1], "--json"), &fulfillmentv1.ListOutboxMessagesResponse{}); len(got.GetMessages()) != 1 || got.GetMessages()[0].GetId() != ids[1] {
		t.Errorf("--order %s: %v", orders[1], got)
	}

	// crm's in two pages: --limit, then --page-token with the same filter.
	out, errOut, err := s.ctl(t, "outbox", "list", "--destination", "crm", "--limit", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	first := fromJSON(t, out, &fulfillmentv1.ListOutboxMessagesResponse{})
	token := first.GetNextPageToken()
	if len(first.GetMessages()) != 2 || token == "" || errOut != "more messages follow: add --page-token "+token+" to continue, or raise --limit\n" {
		t.Fatalf("--limit 2: %d messages, token %q, stderr %q", len(first.GetMessages()), token, errOut)
	}
	out, errOut, err = s.ctl(t, "outbox", "list", "--destination", "crm", "--limit", "2", "--page-token", token, "--json")
	rest := fromJSON(t, out, &fulfillmentv1.ListOutboxMessagesResponse{})
	if err != nil || errOut != "" || len(rest.GetMessages()) != 1 || rest.GetNextPageToken() != "" {
		t.Fatalf("second page: %v, %v, stderr %q", rest, err, errOut)
	}
	var paged []string
	for _, m := range slices.Concat(first.GetMessages(), rest.GetMessages()) {
		paged = append(paged, m.GetOrderId())
	}
	if !slices.Equal(paged, listed) {
		t.Errorf("paged through the messages of orders %v, the table lists %v", paged, listed)
	}

	// An uncertain message, as text and as JSON.
	lineKey := fulfillment.LineKey(orders[0], 1)
	wantMatches(t, "outbox get "+ids[0], s.ctlOK(t, "outbox", "get", ids[0]),
		`(?m)^id +`+ids[0]+`$`, `(?m)^state +uncertain$`, `(?m)^destination +crm$`,
		`(?m)^idempotency key +`+regexp.QuoteMeta(lineKey)+`$`, `(?m)^order +`+orders[0]+`$`, `(?m)^line +1$`,
		`(?m)^required +yes$`, `(?m)^next attempt +-$`, `(?m)^last status +500$`,
		`(?m)^attempt history \(1\):\nATTEMPT +STARTED +TOOK +STATUS +OUTCOME +REASON\n1 +`+timeRE+` +`+tookRE+` +500 +uncertain +HTTP 500\n\n`,
		`(?m)^payload:\n\{\n(  .*\n)*  "type": "fulfillment\.requested",$`)
	m := fromJSON(t, s.ctlOK(t, "outbox", "get", ids[0], "--json"), &fulfillmentv1.OutboxMessage{})
	if m.GetIdempotencyKey() != lineKey || len(m.GetAttemptHistory()) != 1 || m.GetPayload() == "" {
		t.Errorf("outbox get --json: %v", m)
	}

	// The failed one: retried, pending again, then delivered under the
	// same key; its history shows every attempt.
	erpKey := fulfillment.LineKey(erpOrder, 1)
	wantMatches(t, "outbox get "+failedID, s.ctlOK(t, "outbox", "get", failedID),
		`(?m)^state +failed$`, `(?m)^attempts +2$`, `(?m)^last status +400$`, `(?m)^last error +HTTP 400$`,
		`(?m)^attempt history \(2\):\nATTEMPT .*\n1 +`+timeRE+` +`+tookRE+` +400 +retry +HTTP 400\n2 +`+timeRE+` +`+tookRE+` +400 +retry +HTTP 400\n\n`)
	out, errOut, err = s.ctl(t, "outbox", "retry", failedID)
	if err != nil || !regexp.MustCompile(`(?m)^state +pending$`).MatchString(out) ||
		errOut != "message "+failedID+" is pending again: it will be sent to erp again under the same idempotency key "+erpKey+"\n" {
		t.Fatalf("outbox retry: %v\n%s\nstderr %q", err, out, errOut)
	}
	waitUntil(t, "delivered after the retry", func() bool { return s.messageState(t, failedID) == "delivered" })
	if n, e := erp.Requests(erpKey), erp.Effects(erpKey); n != 3 || e != 1 {
		t.Errorf("erp had %d requests and %d effects of %s, want 3 and 1", n, e, erpKey)
	}
	wantMatches(t, "outbox get "+failedID+" after the retry", s.ctlOK(t, "outbox", "get", failedID),
		`(?m)^state +delivered$`, `(?m)^last status +200$`,
		`(?m)^attempt history \(3\):\nATTEMPT .*\n1 .* 400 +retry .*\n2 .* 400 +retry .*\n1 +`+timeRE+` +`+tookRE+` +200 +delivered +HTTP 200\n\n`)

	// What the service refuses, on one line.
	out, _, err = s.ctl(t, "outbox", "retry", failedID)
	wantAPIError(t, err, codes.FailedPrecondition,
		"FAILED_PRECONDITION: message "+failedID+" was delivered: pass resend to send it again under the same key")
	if out != "" {
		t.Errorf("a refused retry printed %q", out)
	}
	// With --resend, a delivered message goes out again under its key.
	if out := s.ctlOK(t, "outbox", "retry", failedID, "--resend"); !regexp.MustCompile(`(?m)^state +pending$`).MatchString(out) {
		t.Fatalf("outbox retry --resend:\n%s", out)
	}
	waitUntil(t, "delivered again", func() bool { return erp.Requests(erpKey) == 4 && s.messageState(t, failedID) == "delivered" })
	// This receiver applies every request it accepts: the resend is a second
	// effect there, which is why a delivered message is resent only when asked.
	if e := erp.Effects(erpKey); e != 2 {
		t.Errorf("erp applied %s %d times after the resend, want 2", erpKey, e)
	}
	_, _, err = s.ctl(t, "outbox", "get", "999999")
	wantAPIError(t, err, codes.NotFound, "NOT_FOUND: ")
	_, _, err = s.ctl(t, "outbox", "retry", "abc")
	wantAPIError(t, err, codes.InvalidArgument, "INVALID_ARGUMENT: message_id: ")
	_, _, err = s.ctl(t, "outbox", "list", "--state", "lost")
	wantAPIError(t, err, codes.InvalidArgument, "INVALID_ARGUMENT: state: ")

	// Destinations: listed, disabled with a reason, enabled.
	wantMatches(t, "destinations list", s.ctlOK(t, "destinations", "list"),
		`\AID +STATE +PENDING +FAILED +UNCERTAIN +IDEMPOTENT +EVENTS +URL +DISABLED\n`+
			`crm +enabled +0 +0 +3 +no +- +`+regexp.QuoteMeta(crm.URL())+` +-\n`+
			`erp +enabled +0 +0 +0 +yes +- +`+regexp.QuoteMeta(erp.URL())+` +-\n\z`)
	if _, _, err := s.ctl(t, "destinations", "disable", "crm"); err == nil || !strings.Contains(err.Error(), `"reason" not set`) {
		t.Errorf("disable without --reason: %v", err)
	}
	out, errOut, err = s.ctl(t, "destinations", "disable", "crm", "--reason", "maintenance window")
	if err != nil || !regexp.MustCompile(`(?m)^crm +disabled +0 +0 +3 .* `+timeRE+` maintenance window \(by admin\)$`).MatchString(out) ||
		!strings.HasPrefix(errOut, "deliveries to crm are stopped") {
		t.Fatalf("destinations disable: %v\n%s\nstderr %q", err, out, errOut)
	}
	// A message retried meanwhile waits.
	s.ctlOK(t, "outbox", "retry", ids[1])
	list := fromJSON(t, s.ctlOK(t, "destinations", "list", "--json"), &fulfillmentv1.ListDestinationsResponse{})
	if d := list.GetDestinations(); len(d) != 2 || d[0].GetId() != "crm" || d[0].GetEnabled() || d[0].GetPending() != 1 ||
		d[0].GetDisabledReason() != "maintenance window (by admin)" || !d[1].GetEnabled() {
		t.Errorf("destinations list --json: %v", list)
	}
	d := fromJSON(t, s.ctlOK(t, "destinations", "enable", "crm", "--json"), &fulfillmentv1.Destination{})
	if !d.GetEnabled() || d.GetDisabledReason() != "" || d.GetDisableTime() != nil {
		t.Errorf("destinations enable --json: %v", d)
	}
	waitUntil(t, "delivered once enabled", func() bool { return s.messageState(t, ids[1]) == "delivered" })
	if key := fulfillment.LineKey(orders[1], 1); crm.Requests(key) != 2 || crm.Effects(key) != 1 {
		t.Errorf("crm had %d requests and %d effects of %s, want 2 and 1", crm.Requests(key), crm.Effects(key), key)
	}
	_, _, err = s.ctl(t, "destinations", "enable", "nope")
	wantAPIError(t, err, codes.NotFound, `NOT_FOUND: destination "nope" is not configured`)

	// crm has the third message, its on-call says: confirmed, it is
	// delivered and nothing is sent; a second confirmation is refused.
	if _, _, err := s.ctl(t, "outbox", "confirm", ids[2]); err == nil || !strings.Contains(err.Error(), `"note" not set`) {
		t.Errorf("confirm without --note: %v", err)
	}
	out, errOut, err = s.ctl(t, "outbox", "confirm", ids[2], "--note", "crm's on-call sees it applied once", "--actor-detail", "Dana")
	if err != nil || !regexp.MustCompile(`(?m)^state +delivered$`).MatchString(out) ||
		errOut != "message "+ids[2]+" is delivered: nothing was sent; its open items, if any, are resolved as confirmed_delivered\n" {
		t.Fatalf("outbox confirm: %v\n%s\nstderr %q", err, out, errOut)
	}
	time.Sleep(300 * time.Millisecond) // claim polls: nothing may be sent
	if key := fulfillment.LineKey(orders[2], 1); crm.Requests(key) != 1 {
		t.Errorf("crm had %d requests of %s after the confirmation, want the first only", crm.Requests(key), key)
	}
	_, _, err = s.ctl(t, "outbox", "confirm", ids[2], "--note", "again")
	wantAPIError(t, err, codes.FailedPrecondition, "FAILED_PRECONDITION: message "+ids[2]+" is delivered already")
}

// The history shows how many older attempts the service left out.
func TestMessageDetailOmittedAttempts(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	m := &fulfillmentv1.OutboxMessage{
		Id: "7", State: "failed", AttemptHistory: []*fulfillmentv1.DeliveryAttempt{{Attempt: 100, Status: 503, Outcome: "retry"}},
		OmittedAttempts: 99,
	}
	if err := messageDetail(&b, m); err != nil {
		t.Fatal(err)
	}
	wantMatches(t, "messageDetail", b.String(), `(?m)^attempt history \(1, and 99 older not shown\):\nATTEMPT .*\n100 +- +- +503 +retry +-\n`)
}

// A listing whose time flag is a duration ("--from 1h") means another time
// at each call, and a page token holds its listing to the filters of the
// page before: the hint to continue names the time the duration meant, and
// the command given with it reads on. (With the duration repeated, the
// next call was refused: another filter.)
func TestContinueAListingOfARelativeTime(t *testing.T) {
	t.Parallel()
	s := startService(t)
	for _, id := range []string{"rel-1", "rel-2", "rel-3"} {
		s.payOrder(t, id)
	}
	events := func(out string) int {
		return len(fromJSON(t, out, &fulfillmentv1.ListInboxEventsResponse{}).GetEvents())
	}
	args := []string{"events", "list", "--from", "1h", "--limit", "1", "--json"}
	out, errOut, err := s.ctl(t, args...)
	if err != nil || events(out) != 1 {
		t.Fatalf("%v: %v, %q", args, err, errOut)
	}
	m := regexp.MustCompile(`add --page-token (\S+) --from (\S+) \(what --from 1h meant\) to continue`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("the hint %q names no token and time", errOut)
	}
	args[slices.Index(args, "1h")] = m[2]
	args = append(args, "--page-token", m[1])
	if out, errOut, err := s.ctl(t, args...); err != nil || events(out) != 1 {
		t.Errorf("%v: %v, %q", args, err, errOut)
	}
}
