package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// A bulk replay from the command line: plan (nothing changes), start
// refused without --yes, start, follow it to done, list it; a second
// start matching nothing is refused on one line.
func TestRedriveCommands(t *testing.T) {
	t.Parallel()
	s := startService(t)
	for _, moi := range []string{"rd-1", "rd-2"} {
		s.payOrder(t, moi)
	}
	waitProcessed := func(n int) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := s.client.ListInboxEvents(admin(t), &fulfillmentv1.ListInboxEventsRequest{State: "processed"})
			if err == nil && len(resp.GetEvents()) == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("events still not processed: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitProcessed(2)
	filter := []string{"--target", "events", "--org", svcOrg, "--state", "processed"}

	out := s.ctlOK(t, append([]string{"redrive", "plan"}, filter...)...)
	if !strings.Contains(out, "matching items: 2\n") || !strings.Contains(out, "payment.confirmed") {
		t.Errorf("plan:\n%s", out)
	}
	// The provider and time filters narrow the plan as they narrow events list.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--provider", "yolfi", "--from", "1h"}, "matching items: 2\n"},
		{[]string{"--provider", "tbank"}, "matching items: 0\n"},
		{[]string{"--before", "1h"}, "matching items: 0\n"},
		{[]string{"--environment", "live"}, "matching items: 2\n"},
		{[]string{"--environment", "test"}, "matching items: 0\n"},
		// The flag's first name, still taken.
		{[]string{"--env", "test"}, "matching items: 0\n"},
	} {
		if out := s.ctlOK(t, append(append([]string{"redrive", "plan"}, filter...), c.args...)...); !strings.Contains(out, c.want) {
			t.Errorf("plan %v:\n%s", c.args, out)
		}
	}
	if _, _, err := s.ctl(t, append([]string{"redrive", "plan", "--from", "yesterday"}, filter...)...); err == nil || !strings.Contains(err.Error(), "--from") {
		t.Errorf("plan --from yesterday: %v, want an error naming --from", err)
	}
	if _, _, err := s.ctl(t, append([]string{"redrive", "start"}, filter...)...); err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Errorf("start without --yes: %v", err)
	}
	out, errOut, err := s.ctl(t, append([]string{"redrive", "start", "--yes", "--detail", "test"}, filter...)...)
	if err != nil || !strings.Contains(errOut, "started with 2 items") {
		t.Fatalf("start: %v, stderr %q", err, errOut)
	}
	id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1] // "id  N"
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(s.ctlOK(t, "redrive", "get", id), "done") {
		if time.Now().After(deadline) {
			t.Fatal("the re-drive is not done after 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out := s.ctlOK(t, "redrive", "get", id); !strings.Contains(out, "2 applied, 0 skipped, of 2") {
		t.Errorf("get:\n%s", out)
	}
	if out := s.ctlOK(t, "redrive", "list", "--org", svcOrg); !strings.Contains(out, id) || !strings.Contains(out, "admin") {
		t.Errorf("list:\n%s", out)
	}
	waitProcessed(2)
	if _, _, err := s.ctl(t, "redrive", "cancel", id); err == nil || !strings.Contains(err.Error(), "FailedPrecondition") && !strings.Contains(err.Error(), "FAILED_PRECONDITION") {
		t.Errorf("cancelling a done run: %v", err)
	}
}

// A run's filter shows the keys that are set, the provider and times
// included; it showed every key, "env= type= decision=" and so on, and
// neither provider nor times.
func TestRedriveFilterText(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	from := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	err := redriveDetail(&out, &fulfillmentv1.Redrive{Id: "7", Filter: &fulfillmentv1.RedriveFilter{Target: "events", OrgId: "org_a",
		State: "unmatched", Provider: "tbank", ReceivedAfter: timestamppb.New(from)}})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^filter +state=unmatched provider=tbank from=2025-06-01T12:00:00Z$`).MatchString(out.String()) {
		t.Errorf("redrive get printed\n%s", out.String())
	}
	if got := filterText(&fulfillmentv1.RedriveFilter{Target: "outbox", State: "failed", Environment: "test", DestinationId: "crm"}); got != "state=failed environment=test destination=crm" {
		t.Errorf("outbox filter: %q", got)
	}
}
