package yolfi

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// Parse validates a verified native Yolfi body and normalizes it for the
// endpoint ep. Provider, endpoint, org and environment come from ep, never
// from the payload; payer metadata is never read, and of the customer only
// the merchant's reference (a subscription's customer).
//
// It returns an error wrapping ingest.ErrInvalidPayload when the body is not
// a valid Yolfi event (or an X-Yolfi-Event-ID header disagrees with it), and
// one wrapping ingest.ErrOrgMismatch when it names another org than ep's.
// Error messages never quote the body.
func Parse(ep fulfillment.Endpoint, h http.Header, body []byte) (fulfillment.ProviderEvent, error) {
	var p Payload
	if err := ingest.DecodePayload(body, &p, typeMessage); err != nil {
		// An event of a type this adapter does not know is stored and
		// ignored whatever its data holds: Yolfi may shape a new type's
		// data otherwise. Its envelope alone is read then.
		var env envelope
		if ingest.DecodePayload(body, &env, typeMessage) != nil || kindOf(env.Type) != fulfillment.EventOther {
			return fulfillment.ProviderEvent{}, err
		}
		p = Payload{ID: env.ID, Type: env.Type, Livemode: env.Livemode, OrgID: env.OrgID, CreatedAt: env.CreatedAt}
	}

	var bad ingest.Problems
	bad.Text("id", p.ID, fulfillment.RuleEventID, true)
	bad.Text("type", p.Type, fulfillment.RuleEventType, true)
	var occurred time.Time
	if p.CreatedAt != "" {
		t, err := time.Parse(time.RFC3339, p.CreatedAt)
		if err != nil {
			bad.Add(`createdAt must be an RFC 3339 time such as "2026-11-29T10:15:30Z"`)
		} else {
			occurred = t.UTC()
		}
	}
	bad.Text("orgId", p.OrgID, fulfillment.RuleRef, false)
	if err := bad.Err(); err != nil {
		return fulfillment.ProviderEvent{}, err
	}

	// The header is an unsigned copy of the id, which Yolfi may leave out
	// (the signed body's id is the one that counts): a different one, or
	// two, mean the request was not sent by Yolfi as documented, or was
	// mangled on its way.
	switch ids := h.Values(EventIDHeader); {
	case len(ids) == 0:
	case len(ids) > 1:
		return fulfillment.ProviderEvent{}, ingest.Invalid("more than one " + EventIDHeader + " header")
	case ids[0] != p.ID:
		return fulfillment.ProviderEvent{}, ingest.Invalid("the " + EventIDHeader + " header does not match the body's id")
	}
	if p.OrgID != "" && p.OrgID != ep.OrgID {
		return fulfillment.ProviderEvent{}, fmt.Errorf("%w: the event's orgId is not the org of endpoint %q", ingest.ErrOrgMismatch, ep.ID)
	}

	var n normalized
	for _, f := range dataFields {
		v := f.wire(&p.Data)
		bad.Text(f.path, v, f.rule, false)
		f.put(&n, v)
	}
	info := &n.payment
	kind := kindOf(p.Type)
	if a := amountOf(&p.Data); a != "" {
		d, err := fulfillment.ParseDecimal(a)
		switch {
		case err != nil:
			bad.Add(amountPath + " must be a plain decimal string such as \"25.000000\" (" + err.Error() + ")")
		case n.token != "" && n.network != "":
			info.Amount = fulfillment.TokenAmount(d, n.token, n.network)
		}
		// An amount without its token and network means nothing: a
		// confirmation needs both (below); other events keep the amount in
		// their raw body only.
	}
	info.AttemptRef = info.Attempt()

	if kind == fulfillment.EventPaymentConfirmed {
		if amountOf(&p.Data) == "" {
			bad.Add(amountPath + " is required for " + TypePaymentConfirmed)
		}
		if n.token == "" {
			bad.Add("data.token is required for " + TypePaymentConfirmed)
		}
		if n.network == "" {
			bad.Add("data.network is required for " + TypePaymentConfirmed)
		}
		if !anyNonEmpty(orderRefs(info)) {
			bad.Add(TypePaymentConfirmed + " needs at least one of " + orderRefNames)
		}
	}
	if (kind == fulfillment.EventSubscriptionOverdue || kind == fulfillment.EventSubscriptionCancelled) && info.SubscriptionID == "" {
		bad.Add("data.subscriptionId is required for " + p.Type + ": the subscription it concerns")
	}
	if err := bad.Err(); err != nil {
		return fulfillment.ProviderEvent{}, err
	}

	livemode := p.Livemode == nil || *p.Livemode
	return fulfillment.ProviderEvent{
		Provider:    ep.Provider,
		EndpointID:  ep.ID,
		OrgID:       ep.OrgID,
		Environment: ep.Environment,
		EventID:     p.ID,
		Type:        p.Type,
		Kind:        kind,
		TestMode:    !livemode || strings.HasPrefix(p.ID, TestEventIDPrefix),
		OccurredAt:  occurred,
		Payment:     n.payment,
		Refs:        n.refs,
	}, nil
}

func anyNonEmpty(ss []string) bool {
	for _, s := range ss {
		if s != "" {
			return true
		}
	}
	return false
}

// typeMessage says what a member of the wrong JSON type should be.
func typeMessage(path string) string {
	switch path {
	case "livemode":
		return "livemode must be true or false"
	case "data", "data.customer":
		return path + " must be an object"
	case amountPath:
		return amountPath + ` must be a decimal string such as "25.000000"`
	case "":
		return "the body must be a JSON object"
	}
	return path + " must be a string"
}
