// Package tbank is the ingest adapter for T-Bank Internet Acquiring (API v2)
// notifications: the Token signed inside the JSON body with the terminal
// password, the notification fields and statuses, and the plain `OK` the
// bank expects once a notification is stored.
//
// The same Token function signs the requests the service sends to the bank
// through Client (Init, GetState).
package tbank

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// Provider registers the T-Bank adapter (package providers).
//
// Terminal passwords are the bank's to choose, and its published examples
// are 11 and 14 characters long.
var Provider = ingest.Provider{Name: fulfillment.ProviderTBank, New: New, MinSecretLen: 8, CheckTogether: CheckTogether}

// The duplicate OrderId policies are the domain's: an endpoint names one.
const (
	PolicyFail   = fulfillment.PolicyFail
	PolicyIgnore = fulfillment.PolicyIgnore
	PolicyReuse  = fulfillment.PolicyReuse
)

// Options are the endpoint options of a T-Bank endpoint (its `options:`
// block). The terminal password is the endpoint's secret, not an option.
type Options struct {
	// TerminalKey is the terminal every notification of the endpoint must
	// name. Required.
	TerminalKey string `yaml:"terminal_key"`
	// DuplicateOrderCodes are the bank ErrorCodes that mean "this OrderId
	// already exists" in an answer to Init. The bank does not publish
	// them; none by default.
	DuplicateOrderCodes []string `yaml:"duplicate_order_codes"`
	// DuplicateOrderPolicy is what such an answer leads to (default fail).
	DuplicateOrderPolicy fulfillment.DuplicateOrderPolicy `yaml:"duplicate_order_policy"`
	// APIURL is the bank's API base, to which /v2/Init and /v2/GetState
	// are appended (default DefaultAPIURL).
	APIURL string `yaml:"api_url"`
	// NotificationURL, when set, is sent with each Init: where the bank
	// posts that payment's notifications instead of the terminal's
	// configured address.
	NotificationURL string `yaml:"notification_url"`
	// Recurrent makes StartPayment of an order with a subscription line ask
	// the bank to bind the payer's card for recurrent charges (Init's
	// Recurrent Y, with the line's customer as CustomerKey): the bank then
	// names the binding (RebillId), which the merchant charges each
	// period, and which names the subscription here. Off by default: a
	// terminal the bank has not enabled for recurrent payments may refuse
	// such an Init.
	Recurrent bool `yaml:"recurrent"`
}

// DefaultAPIURL is T-Bank's production API base.
const DefaultAPIURL = "https://securepay.tinkoff.ru"

// DuplicateOrder reports whether errorCode, from an answer of the bank,
// means "this OrderId already exists".
func (o Options) DuplicateOrder(errorCode string) bool {
	return slices.Contains(o.DuplicateOrderCodes, errorCode)
}

// check validates the options and fills in the default policy.
func (o *Options) check() error {
	switch {
	case o.TerminalKey == "":
		return errors.New("terminal_key is required: the terminal the bank names in every notification")
	case fulfillment.RuleEventID.Check(o.TerminalKey) != nil || strings.Contains(o.TerminalKey, ":"):
		return fmt.Errorf("terminal_key must be printable ASCII without spaces or colons, %d bytes at most", fulfillment.MaxIDLen)
	}
	for i, code := range o.DuplicateOrderCodes {
		switch {
		case code == "" || !allDigits(code) || len(code) > maxErrorCodeLen:
			return fmt.Errorf("duplicate_order_codes[%d] must be a bank ErrorCode: digits, %d at most", i, maxErrorCodeLen)
		case code == "0":
			return fmt.Errorf("duplicate_order_codes[%d]: ErrorCode 0 means success", i)
		case slices.Contains(o.DuplicateOrderCodes[:i], code):
			return fmt.Errorf("duplicate_order_codes[%d] repeats an earlier code", i)
		}
	}
	if o.APIURL == "" {
		o.APIURL = DefaultAPIURL
	}
	if err := checkURL(o.APIURL); err != nil {
		return fmt.Errorf("api_url: %w", err)
	}
	if err := checkURL(o.NotificationURL); o.NotificationURL != "" && err != nil {
		return fmt.Errorf("notification_url: %w", err)
	}
	switch o.DuplicateOrderPolicy {
	case "":
		o.DuplicateOrderPolicy = PolicyFail
	case PolicyFail:
	case PolicyIgnore, PolicyReuse:
		if len(o.DuplicateOrderCodes) == 0 {
			return fmt.Errorf("duplicate_order_policy %s needs duplicate_order_codes: without them no answer is recognized as a duplicate OrderId",
				o.DuplicateOrderPolicy)
		}
	default:
		return fmt.Errorf("duplicate_order_policy must be %s, %s or %s", PolicyFail, PolicyIgnore, PolicyReuse)
	}
	return nil
}

// checkURL accepts an absolute http(s) URL without credentials.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return errors.New("must be an absolute http:// or https:// URL")
	case u.User != nil:
		return errors.New("must not hold credentials")
	}
	return nil
}

// maxErrorCodeLen bounds a configured ErrorCode.
const maxErrorCodeLen = 16

// Adapter is the T-Bank adapter of one endpoint.
type Adapter struct {
	ep        fulfillment.Endpoint
	passwords [][]byte
	opts      Options
}

var _ ingest.Adapter = (*Adapter)(nil)

// New returns the adapter of endpoint ep, verifying with the terminal
// passwords in secrets (several during a rotation), with the endpoint's
// options.
func New(ep fulfillment.Endpoint, secrets [][]byte, options *yaml.Node) (ingest.Adapter, error) {
	var o Options
	if err := ingest.DecodeOptions(options, &o); err != nil {
		return nil, err
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	return &Adapter{ep: ep, passwords: secrets, opts: o}, nil
}

// CheckTogether refuses a terminal on which endpoints of more than one org
// or environment bind cards (Options.Recurrent). The bank keeps a payer's
// bound cards under the CustomerKey, which is the customer's account_ref,
// unique only within one org and environment: on such a terminal one org's
// customer would be offered, and could be charged through, the cards
// another's customer of the same account_ref bound. An endpoint that binds
// no cards sends no CustomerKey, so it may share the terminal (naming its
// own notification_url).
func CheckTogether(eps []ingest.Endpoint) error {
	first := map[string]ingest.Endpoint{} // the first endpoint binding cards on each terminal
	for _, e := range eps {
		a, ok := e.Adapter.(*Adapter)
		if !ok || !a.opts.Recurrent {
			continue
		}
		f, seen := first[a.opts.TerminalKey]
		switch {
		case !seen:
			first[a.opts.TerminalKey] = e
		case e.OrgID != f.OrgID || e.Environment != f.Environment:
			return fmt.Errorf("%q (org %s, %s) and %q (org %s, %s) both bind cards (recurrent) on one terminal_key: "+
				"the bank keeps bound cards under the customer's account_ref, unique only within one org and environment; "+
				"give each org and environment a terminal of its own for card bindings",
				f.ID, f.OrgID, f.Environment, e.ID, e.OrgID, e.Environment)
		}
	}
	return nil
}

// Options returns the endpoint's options, with the default policy filled
// in.
func (a *Adapter) Options() Options {
	o := a.opts
	o.DuplicateOrderCodes = slices.Clone(o.DuplicateOrderCodes)
	return o
}

// Verify checks the body's Token against the endpoint's passwords (see the
// function Verify).
func (a *Adapter) Verify(_ http.Header, body []byte) error { return Verify(body, a.passwords) }

// Parse normalizes a verified body for the endpoint (see the function
// Parse).
func (a *Adapter) Parse(_ http.Header, body []byte) (fulfillment.ProviderEvent, error) {
	return Parse(a.ep, a.opts.TerminalKey, body)
}

// ackBody is the whole answer the bank takes as "stored": anything else
// makes it deliver the notification again.
const ackBody = "OK"

// Acknowledge answers 200 with the body OK: the notification is stored (or
// was already).
func (*Adapter) Acknowledge(w http.ResponseWriter) {
	writeText(w, http.StatusOK, ackBody)
}

// Reject answers status with reason as plain text, which is never OK (the
// bank would take it as stored). Reject never acknowledges: a status
// outside 4xx and 5xx becomes 500.
func (*Adapter) Reject(w http.ResponseWriter, status int, reason string) {
	if status < 400 || status > 599 {
		status = http.StatusInternalServerError
	}
	if r := strings.TrimSpace(reason); r == "" || strings.EqualFold(r, ackBody) {
		reason = http.StatusText(status)
		if reason == "" {
			reason = "rejected"
		}
	}
	writeText(w, status, reason)
}

func writeText(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
