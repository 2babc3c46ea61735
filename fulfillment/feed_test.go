package fulfillment_test

import (
	"testing"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

func TestFeedCursorBefore(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b fulfillment.FeedCursor
		want bool
	}{
		{fulfillment.FeedCursor{}, fulfillment.FeedCursor{XID: 1}, true},
		{fulfillment.FeedCursor{XID: 5, ID: 9}, fulfillment.FeedCursor{XID: 6, ID: 1}, true},
		{fulfillment.FeedCursor{XID: 6, ID: 1}, fulfillment.FeedCursor{XID: 6, ID: 2}, true},
		{fulfillment.FeedCursor{XID: 6, ID: 2}, fulfillment.FeedCursor{XID: 6, ID: 2}, false},
		{fulfillment.FeedCursor{XID: 7, ID: 1}, fulfillment.FeedCursor{XID: 6, ID: 9}, false},
	} {
		if got := c.a.Before(c.b); got != c.want {
			t.Errorf("%v.Before(%v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestFeedParamsMatches(t *testing.T) {
	t.Parallel()
	e := fulfillment.OrderEvent{OrgID: "org_a", Environment: "live"}
	for _, c := range []struct {
		name string
		p    fulfillment.FeedParams
		want bool
	}{
		{"every org", fulfillment.FeedParams{}, true},
		{"visible", fulfillment.FeedParams{VisibleOrgs: []string{"org_b", "org_a"}}, true},
		{"not visible", fulfillment.FeedParams{VisibleOrgs: []string{"org_b"}}, false},
		{"no org visible", fulfillment.FeedParams{VisibleOrgs: []string{}}, false},
		{"its org", fulfillment.FeedParams{OrgID: "org_a"}, true},
		{"another org", fulfillment.FeedParams{OrgID: "org_b"}, false},
		{"its environment", fulfillment.FeedParams{Environment: "live"}, true},
		{"another environment", fulfillment.FeedParams{Environment: "test"}, false},
	} {
		if got := c.p.Matches(e); got != c.want {
			t.Errorf("%s: Matches = %v, want %v", c.name, got, c.want)
		}
	}
}
