package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// Each source's events pass its provider's adapter: a confirmation paying
// the order named, under the event id the Mix counts, and a stale event of
// another kind.
func TestSourcesMakeWhatTheAdaptersAccept(t *testing.T) {
	t.Parallel()
	var tbankOptions yaml.Node
	if err := tbankOptions.Encode(map[string]string{"terminal_key": "LoadTerminal"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		provider ingest.Provider
		secret   string
		options  *yaml.Node
		src      Source
		order    func(fulfillment.PaymentInfo) string // the order reference the service matches
	}{
		{yolfi.Provider, "ywhsec_load_0123456789", nil,
			YolfiSource{Org: "org_a", Live: true, Secret: []byte("ywhsec_load_0123456789"), BodySize: DefaultBodySize},
			func(p fulfillment.PaymentInfo) string { return p.MerchantOrderID }},
		{tbank.Provider, "terminal-pw", &tbankOptions, NewTBankSource("LoadTerminal", []byte("terminal-pw")),
			func(p fulfillment.PaymentInfo) string { return p.CheckoutSessionID }},
	}
	for _, c := range cases {
		t.Run(string(c.provider.Name), func(t *testing.T) {
			t.Parallel()
			ep := fulfillment.Endpoint{ID: "ep", Provider: c.provider.Name, OrgID: "org_a", Environment: fulfillment.EnvLive}
			a, err := c.provider.New(ep, [][]byte{[]byte(c.secret)}, c.options)
			if err != nil {
				t.Fatal(err)
			}
			parse := func(ev Event) fulfillment.ProviderEvent {
				t.Helper()
				if err := a.Verify(ev.Header, ev.Body); err != nil {
					t.Fatalf("%s: %v", ev.Type, err)
				}
				pe, err := a.Parse(ev.Header, ev.Body)
				if err != nil {
					t.Fatalf("%s: %v", ev.Type, err)
				}
				if pe.EventID != ev.ID {
					t.Errorf("%s: event id %q, the source says %q", ev.Type, pe.EventID, ev.ID)
				}
				return pe
			}
			conf := c.src.Confirmed("load-1")
			if pe := parse(conf); pe.Kind != fulfillment.EventPaymentConfirmed || c.order(pe.Payment) != "load-1" {
				t.Errorf("confirmation: kind %s, order %q; want %s of load-1", pe.Kind, c.order(pe.Payment), fulfillment.EventPaymentConfirmed)
			}
			if other := c.src.Confirmed("load-2"); other.ID == conf.ID || other.PaymentID == conf.PaymentID {
				t.Errorf("two confirmations share event id %q or payment %q", conf.ID, conf.PaymentID)
			}
			stale := c.src.Stale(conf)
			if pe := parse(stale); pe.Kind == fulfillment.EventPaymentConfirmed || stale.ID == conf.ID || c.order(pe.Payment) != "load-1" {
				t.Errorf("stale event %s (%s, order %q): want another kind and id, same order", stale.ID, pe.Kind, c.order(pe.Payment))
			}
		})
	}
}

// A 200 counts only with the body the provider takes as the
// acknowledgement, when it names one.
func TestSenderWantsTheAcknowledgement(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(r.URL.Query().Get("answer")))
	}))
	defer srv.Close()
	for _, c := range []struct {
		answer, ack string
		ok          bool
	}{{"OK", "OK", true}, {"OK\n", "OK", false}, {"stored", "OK", false}, {"", "OK", false}, {"anything", "", true}} {
		s := NewSender(srv.URL+"?answer="+url.QueryEscape(c.answer), 1)
		status, err := s.Send(context.Background(), Event{Body: []byte(`{}`), Ack: c.ack})
		if (err == nil && status == http.StatusOK) != c.ok {
			t.Errorf("answer %q, ack %q: status %d, error %v; want acknowledged %v", c.answer, c.ack, status, err, c.ok)
		}
		s.Close()
	}
}
