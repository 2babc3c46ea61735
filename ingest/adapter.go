// Package ingest is the webhook gateway: it verifies each provider request
// over its raw body, normalizes it through the endpoint's adapter, and hands
// it to the FulfillmentService, acknowledging only once the event is
// committed.
package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// Adapter speaks one provider's webhook language for one endpoint: its
// signature scheme, its payload and its acknowledgement, with the
// endpoint's secrets and settings. It returns normalized events and knows
// nothing of storage or transport.
type Adapter interface {
	// Verify checks that the request comes from the provider, over the raw
	// body, with the endpoint's secrets (any of several during a rotation),
	// in constant time. It may read the body where the provider signs
	// fields inside it, but nothing of an unverified body is trusted. It
	// returns an error wrapping ErrSignature when the proof is missing,
	// malformed or wrong.
	Verify(h http.Header, body []byte) error
	// Parse validates a verified body and normalizes it for the endpoint.
	// It returns an error wrapping ErrInvalidPayload for a body that is not
	// the provider's schema, ErrOrgMismatch when the payload names another
	// org than the endpoint's, and ErrAccountMismatch when it names another
	// merchant account at the provider than the endpoint's.
	Parse(h http.Header, body []byte) (fulfillment.ProviderEvent, error)
	// Acknowledge writes the reply the provider expects for an accepted
	// (or duplicate) event.
	Acknowledge(w http.ResponseWriter)
	// Reject writes the reply for a refused request with the given HTTP
	// status; reason is a short, body-free explanation.
	Reject(w http.ResponseWriter, status int, reason string)
}

// PaymentTaker is an adapter whose provider also takes payments the
// service starts (StartPayment) and reports their state: its endpoint's
// account at the provider, called through hc (nil: a client of its own).
type PaymentTaker interface {
	Payments(hc *http.Client) (fulfillment.PaymentProvider, error)
}

// Provider is a payment provider webhooks can come from: what an adapter
// package registers (see package providers).
type Provider struct {
	Name fulfillment.Provider
	// New builds the adapter of one endpoint from its signing secrets and
	// its provider-specific options (the endpoint's `options:` block, which
	// may be empty; decode it with DecodeOptions). An error names what is
	// wrong with the options in one line.
	New func(ep fulfillment.Endpoint, secrets [][]byte, options *yaml.Node) (Adapter, error)
	// MinSecretLen is the shortest signing secret an endpoint may be
	// configured with: the provider issues them, so it knows how short
	// they come.
	MinSecretLen int
	// CheckTogether, when set, checks what the provider's endpoints must
	// agree on between them (an account at the provider that endpoints of
	// two orgs may not share, say), once New has built each of them. eps
	// are the provider's endpoints in the configured order; an error names
	// them by id in one line.
	CheckTogether func(eps []Endpoint) error
}

// DecodeOptions decodes an endpoint's options block into v (a pointer to a
// struct with yaml tags), refusing keys v does not have, with the line of
// the configuration file they are on. A value of the wrong type is named by
// its key and line. An absent block leaves v as it is.
func DecodeOptions(options *yaml.Node, v any) error {
	if options == nil || options.Kind == 0 {
		return nil
	}
	if options.Kind != yaml.MappingNode {
		return decodeOption(options, v)
	}
	known := optionNames(reflect.TypeOf(v).Elem())
	for i := 0; i+1 < len(options.Content); i += 2 {
		if k := options.Content[i]; !slices.Contains(known, k.Value) {
			return fmt.Errorf("line %d: unknown option %q", k.Line, k.Value)
		}
	}
	// One key at a time, so that an error says which key it is about
	// (yaml's own names the line and the type only).
	for i := 0; i+1 < len(options.Content); i += 2 {
		one := *options
		one.Content = options.Content[i : i+2]
		if err := decodeOption(&one, v); err != nil {
			return fmt.Errorf("%s: %w", options.Content[i].Value, err)
		}
	}
	return nil
}

// decodeOption decodes node into v, an error of yaml's reduced to its
// first line.
func decodeOption(node *yaml.Node, v any) error {
	if err := node.Decode(v); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			return errors.New(te.Errors[0])
		}
		return err
	}
	return nil
}

// optionNames are the yaml names of struct type t's fields.
func optionNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" {
			name = strings.ToLower(t.Field(i).Name)
		}
		names = append(names, name)
	}
	return names
}

// Errors returned by adapters.
var (
	// ErrSignature means the request is not signed by the endpoint's secret.
	ErrSignature = errors.New("invalid signature")
	// ErrInvalidPayload means a verified body is not a valid provider event.
	ErrInvalidPayload = errors.New("invalid payload")
	// ErrOrgMismatch means the payload names another org than the endpoint's.
	ErrOrgMismatch = errors.New("org mismatch")
	// ErrAccountMismatch means the payload names another merchant account
	// at the provider (a bank terminal) than the one the endpoint is
	// configured for.
	ErrAccountMismatch = errors.New("account mismatch")
)
