package e2e_test

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/rig/testcert"
)

// With tls configured, the service loads the key pair once and serves it
// on the REST and the webhook listeners alike; plain HTTP is refused.
func TestServiceTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := testcert.SelfSigned(t)
	cfg := testConfig(pgtest.DB(t))
	cfg.TLS = &config.TLS{CertFile: certFile, KeyFile: keyFile}
	a := runApp(t, cfg, slog.New(slog.DiscardHandler), false)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}}}
	for _, tc := range []struct{ name, url string }{
		{"REST", "https://" + a.HTTPAddr() + "/healthz"},
		{"webhooks", "https://" + a.IngestAddr() + "/webhooks/nope"},
	} {
		resp, err := hc.Get(tc.url)
		if err != nil {
			t.Fatalf("%s over TLS: %v", tc.name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 || resp.TLS.PeerCertificates[0].Subject.CommonName != "localhost" {
			t.Errorf("%s: served without the configured certificate", tc.name)
		}
		plain := strings.Replace(tc.url, "https://", "http://", 1)
		if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(plain); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode < 400 {
				t.Errorf("%s answered plain HTTP with %d", tc.name, resp.StatusCode)
			}
		}
	}
}
