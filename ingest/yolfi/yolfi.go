// Package yolfi is the ingest adapter for Yolfi's native (NONE) webhook
// format: X-Yolfi-Signature over the raw body, the event payload described in
// the provider's integration guide, and its JSON acknowledgement.
//
// Never use it for an endpoint configured with a provider-compatible adapter
// (Stripe-, Lemon Squeezy-compatible, …): their payloads differ.
package yolfi

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// Headers of a native Yolfi delivery.
const (
	// SignatureHeader carries base64(HMAC-SHA256(secret, raw body)).
	SignatureHeader = "X-Yolfi-Signature"
	// EventIDHeader is an unsigned copy of the body's id; when present it
	// must equal it.
	EventIDHeader = "X-Yolfi-Event-ID"
)

// Provider registers the native Yolfi adapter (package providers).
var Provider = ingest.Provider{Name: fulfillment.ProviderYolfi, New: New, MinSecretLen: 16}

// Options are the endpoint options of a Yolfi endpoint. There are none
// yet: any key in the block is an error.
type Options struct{}

// Adapter is the native Yolfi adapter of one endpoint.
type Adapter struct {
	ep      fulfillment.Endpoint
	secrets [][]byte
}

var _ ingest.Adapter = (*Adapter)(nil)

// New returns the adapter of endpoint ep, verifying with secrets (several
// during a rotation).
func New(ep fulfillment.Endpoint, secrets [][]byte, options *yaml.Node) (ingest.Adapter, error) {
	var o Options
	if err := ingest.DecodeOptions(options, &o); err != nil {
		return nil, err
	}
	return &Adapter{ep: ep, secrets: secrets}, nil
}

// Verify checks the endpoint's X-Yolfi-Signature (see the function Verify).
func (a *Adapter) Verify(h http.Header, body []byte) error { return Verify(h, body, a.secrets) }

// Parse normalizes a verified body for the endpoint (see the function Parse).
func (a *Adapter) Parse(h http.Header, body []byte) (fulfillment.ProviderEvent, error) {
	return Parse(a.ep, h, body)
}

// Sign returns the X-Yolfi-Signature value of body under secret:
// base64(HMAC-SHA256(secret, body)).
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// signatureLen is the length of a base64 HMAC-SHA256 (32 bytes, padded).
var signatureLen = base64.StdEncoding.EncodedLen(sha256.Size)

// Verify checks X-Yolfi-Signature over the raw body against every non-empty
// secret (an endpoint has several while its secret rotates), comparing in
// constant time. It never parses the body. Errors wrap ingest.ErrSignature
// and never quote the body, the header or a secret.
func Verify(h http.Header, body []byte, secrets [][]byte) error {
	vals := h.Values(SignatureHeader)
	if len(vals) > 1 {
		return sigErr("malformed signature: more than one " + SignatureHeader + " header")
	}
	sig := ""
	if len(vals) == 1 {
		sig = strings.TrimSpace(vals[0])
	}
	if sig == "" {
		return sigErr("missing " + SignatureHeader + " header")
	}
	if len(sig) != signatureLen {
		return sigErr(fmt.Sprintf("malformed signature: %s must be %d base64 characters", SignatureHeader, signatureLen))
	}
	got, err := base64.StdEncoding.Strict().DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return sigErr("malformed signature: " + SignatureHeader + " is not base64")
	}

	usable, ok := 0, false
	for _, secret := range secrets {
		if len(secret) == 0 {
			// Anyone can compute an HMAC under an empty key.
			continue
		}
		usable++
		m := hmac.New(sha256.New, secret)
		m.Write(body)
		if hmac.Equal(m.Sum(nil), got) {
			ok = true // keep going: the time taken does not say which secret matched
		}
	}
	switch {
	case usable == 0:
		return sigErr("no signing secret is configured for this endpoint")
	case !ok:
		return sigErr("signature does not match")
	}
	return nil
}

func sigErr(reason string) error {
	return fmt.Errorf("%w: %s", ingest.ErrSignature, reason)
}

// ackBody is the acknowledgement Yolfi expects with its 200.
var ackBody = []byte(`{"ok":true}`)

// Acknowledge answers 200 {"ok":true}: the event is committed (or was
// already).
func (*Adapter) Acknowledge(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, ackBody)
}

// Reject answers status with {"error": reason}. Reject never acknowledges: a
// status outside 4xx and 5xx becomes 500.
func (*Adapter) Reject(w http.ResponseWriter, status int, reason string) {
	if status < 400 || status > 599 {
		status = http.StatusInternalServerError
	}
	b, err := json.Marshal(struct {
		Error string `json:"error"`
	}{reason})
	if err != nil { // cannot happen for a struct of one string
		b = []byte(`{"error":"rejected"}`)
	}
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// NewRequest builds a native Yolfi delivery of body to url as the provider
// sends it: a JSON POST signed with secret, carrying eventID (when not empty)
// in X-Yolfi-Event-ID.
func NewRequest(ctx context.Context, url string, secret, body []byte, eventID string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(secret, body))
	if eventID != "" {
		req.Header.Set(EventIDHeader, eventID)
	}
	return req, nil
}

// NewID returns prefix followed by 24 random hex digits, e.g. NewID("evt_").
func NewID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails (crypto/rand aborts the program instead)
	return prefix + hex.EncodeToString(b)
}
