package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/wire"
)

// Invalid returns an error wrapping ErrInvalidPayload: a verified body is
// not the provider's schema, for reason (which never quotes the body).
func Invalid(reason string) error {
	return fmt.Errorf("%w: %s", ErrInvalidPayload, reason)
}

// Problems collects what is wrong with a verified body, so that one answer
// lists everything to fix.
type Problems []string

// Add notes one problem.
func (ps *Problems) Add(reason string) { *ps = append(*ps, reason) }

// Text checks a text member named name: required or not, and the domain's
// rule.
func (ps *Problems) Text(name, v string, rule fulfillment.TextRule, required bool) {
	if v == "" {
		if required {
			ps.Add(name + " is required")
		}
		return
	}
	if err := rule.Check(v); err != nil {
		ps.Add(name + " " + err.Error())
	}
}

// Err is every problem as one Invalid error, or nil for none.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	return Invalid(strings.Join(ps, "; "))
}

// DecodePayload reads body into v strictly (wire.Decode). A member of the
// wrong JSON type is described by typeMessage, given its path ("" for the
// body itself); every error is Invalid.
func DecodePayload(body []byte, v any, typeMessage func(path string) string) error {
	err := wire.Decode(body, v)
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		return Invalid(typeMessage(te.Field))
	case err != nil:
		return Invalid(err.Error())
	}
	return nil
}
