package fulfillment

import (
	"strings"
	"testing"
	"time"
)

func TestRedriveFilterValidate(t *testing.T) {
	t.Parallel()
	now := time.Now()
	events := RedriveFilter{Target: RedriveEvents, OrgID: "org_a", State: "processed"}
	outbox := RedriveFilter{Target: RedriveOutbox, OrgID: "org_a", State: "failed"}
	with := func(f RedriveFilter, change func(*RedriveFilter)) RedriveFilter { change(&f); return f }
	for _, tc := range []struct {
		name string
		f    RedriveFilter
		want string // "" for valid
	}{
		{"events", events, ""},
		{"outbox", outbox, ""},
		{"events of a provider in a time range", with(events, func(f *RedriveFilter) {
			f.Provider, f.ReceivedAfter, f.ReceivedBefore = ProviderTBank, now.Add(-time.Hour), now
		}), ""},
		{"no org", with(events, func(f *RedriveFilter) { f.OrgID = "" }), "filter.org_id"},
		{"pending events", with(events, func(f *RedriveFilter) { f.State = "pending" }), "filter.state"},
		{"delivered messages", with(outbox, func(f *RedriveFilter) { f.State = "delivered" }), "filter.state"},
		{"a destination for events", with(events, func(f *RedriveFilter) { f.DestinationID = "crm" }), "filter.destination_id"},
		{"a malformed provider", with(events, func(f *RedriveFilter) { f.Provider = "T Bank" }), "filter.provider"},
		{"an empty time range", with(events, func(f *RedriveFilter) { f.ReceivedAfter, f.ReceivedBefore = now, now }), "filter.received_before"},
		{"a provider for messages", with(outbox, func(f *RedriveFilter) { f.Provider = ProviderYolfi }), "apply to events only"},
		{"a time for messages", with(outbox, func(f *RedriveFilter) { f.ReceivedBefore = now }), "apply to events only"},
		{"an unknown target", with(events, func(f *RedriveFilter) { f.Target = "orders" }), "filter.target"},
		{"events of a type and decision", with(events, func(f *RedriveFilter) { f.Type, f.Decision = "payment.confirmed", "fulfilled" }), ""},
		{"a type no event has", with(events, func(f *RedriveFilter) { f.Type = strings.Repeat("x", 30000) }), "filter.type"},
		{"a decision with spaces", with(events, func(f *RedriveFilter) { f.Decision = "not a decision" }), "filter.decision"},
		{"a malformed endpoint", with(events, func(f *RedriveFilter) { f.EndpointID = "Yolfi Live" }), "filter.endpoint_id"},
		{"messages of a destination", with(outbox, func(f *RedriveFilter) { f.DestinationID = "crm" }), ""},
		{"a malformed destination", with(outbox, func(f *RedriveFilter) { f.DestinationID = `"><script>` }), "filter.destination_id"},
		{"an unknown environment", with(events, func(f *RedriveFilter) { f.Environment = "staging" }), "filter.environment"},
	} {
		err := tc.f.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}
