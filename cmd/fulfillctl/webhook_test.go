package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// webhook send --print builds what the Yolfi adapter reads: a subscription
// event with its subscription, customer and time, and a renewal payment.
func TestWebhookSendSubscriptionEvents(t *testing.T) {
	t.Parallel()
	ep := fulfillment.Endpoint{ID: "yolfi-test", Provider: fulfillment.ProviderYolfi, OrgID: "org_demo", Environment: fulfillment.EnvTest}
	cases := []struct {
		args  []string
		check func(t *testing.T, ev fulfillment.ProviderEvent)
	}{
		{[]string{"--type", "subscription.cancelled", "--subscription-id", "sub_1", "--customer-ref", "user_42",
			"--created-at", "2027-01-15T10:00:00+03:00"}, func(t *testing.T, ev fulfillment.ProviderEvent) {
			p := ev.Payment
			if ev.Kind != fulfillment.EventSubscriptionCancelled || p.SubscriptionID != "sub_1" || p.CustomerRef != "user_42" ||
				p.InvoiceID != "" || ev.OccurredAt.Format("2006-01-02T15:04:05Z07:00") != "2027-01-15T07:00:00Z" {
				t.Errorf("event %+v", ev)
			}
		}},
		{[]string{"--subscription-id", "sub_1", "--amount", "25.000000"}, func(t *testing.T, ev fulfillment.ProviderEvent) {
			p := ev.Payment
			if ev.Kind != fulfillment.EventPaymentConfirmed || p.SubscriptionID != "sub_1" || p.InvoiceID == "" || p.PaymentID == "" {
				t.Errorf("event %+v", ev)
			}
		}},
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("whsec_dGVzdHNlY3JldHRlc3RzZWNyZXR0ZXN0c2VjcmV0"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		var out bytes.Buffer
		cmd := newRootCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(append([]string{"webhook", "send", "--print", "--secret-file", secret}, tc.args...))
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		body, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
		var p yolfi.Payload
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatalf("%v: printed %q: %v", tc.args, out.String(), err)
		}
		h := http.Header{}
		h.Set(yolfi.EventIDHeader, p.ID)
		ev, err := yolfi.Parse(ep, h, []byte(body))
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		tc.check(t, ev)
		// Sent one after the other, a renewal and the cancellation it
		// precedes must not share a createdAt: the default has milliseconds.
		if !slices.Contains(tc.args, "--created-at") && !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(p.CreatedAt) {
			t.Errorf("%v: createdAt %q, want RFC 3339 in UTC to the millisecond", tc.args, p.CreatedAt)
		}
	}
}
