// Package ingest is the webhook gateway: it verifies each provider request
// over its raw body, normalizes it through the endpoint's adapter, and hands
// it to the FulfillmentService, acknowledging only once the event is
// committed.
package ingest

import (
	"errors"
	"net/http"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// Adapter speaks one provider's webhook language: its signature scheme, its
// payload and its acknowledgement. It returns normalized events and knows
// nothing of storage or transport.
type Adapter interface {
	// Verify checks the request signature over the raw body, accepting any of
	// secrets (several during a rotation), in constant time. It returns an
	// error wrapping ErrSignature when the signature is missing, malformed or
	// wrong. It must not parse the body.
	Verify(h http.Header, body []byte, secrets [][]byte) error
	// Parse validates a verified body and normalizes it for the endpoint. It
	// returns an error wrapping ErrInvalidPayload for a body that is not the
	// provider's schema, and ErrOrgMismatch when the payload names another
	// org than the endpoint's.
	Parse(ep fulfillment.Endpoint, h http.Header, body []byte) (fulfillment.ProviderEvent, error)
	// Acknowledge writes the reply the provider expects for an accepted
	// (or duplicate) event.
	Acknowledge(w http.ResponseWriter)
	// Reject writes the reply for a refused request with the given HTTP
	// status; reason is a short, body-free explanation.
	Reject(w http.ResponseWriter, status int, reason string)
}

// Errors returned by adapters.
var (
	// ErrSignature means the request is not signed by the endpoint's secret.
	ErrSignature = errors.New("invalid signature")
	// ErrInvalidPayload means a verified body is not a valid provider event.
	ErrInvalidPayload = errors.New("invalid payload")
	// ErrOrgMismatch means the payload names another org than the endpoint's.
	ErrOrgMismatch = errors.New("org mismatch")
)
