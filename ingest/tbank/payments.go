package tbank

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// currency is the one currency the acquiring takes: amounts are kopecks.
const currency = "RUB"

// payments is an endpoint's terminal as the service's payment provider:
// Init starts a payment, GetState reports one.
type payments struct {
	client *Client
	opts   Options
	ep     fulfillment.Endpoint
}

var _ fulfillment.StatePoller = (*payments)(nil)

// Payments returns the endpoint's terminal as a payment provider, calling
// the bank's API (api_url) with hc (nil: the client's own).
func (a *Adapter) Payments(hc *http.Client) (fulfillment.PaymentProvider, error) {
	c, err := NewClient(a.opts.APIURL, a.opts.TerminalKey, a.passwords, hc)
	if err != nil {
		return nil, err
	}
	return &payments{client: c, opts: a.opts, ep: a.ep}, nil
}

func (p *payments) Account() string { return p.opts.TerminalKey }
func (*payments) Currency() string  { return currency }
func (p *payments) DuplicatePolicy() fulfillment.DuplicateOrderPolicy {
	return p.opts.DuplicateOrderPolicy
}

// CheckStart refuses, on a terminal that binds cards (Options.Recurrent),
// a customer the bank cannot take as CustomerKey.
func (p *payments) CheckStart(s fulfillment.ProviderStart) error {
	if !p.binds(s) {
		return nil
	}
	if err := CheckCustomerKey(s.CustomerRef); err != nil {
		return fmt.Errorf("the endpoint asks the bank to bind the payer's card (options.recurrent) under the customer of the order's "+
			"subscription line (account_ref) as CustomerKey: %w", err)
	}
	return nil
}

// binds says whether s's Init asks for a card binding: on a terminal
// that binds cards, for an order with a subscription line.
func (p *payments) binds(s fulfillment.ProviderStart) bool {
	return p.opts.Recurrent && s.CustomerRef != ""
}

// StartPayment calls Init. Its request depends only on s and the
// endpoint's options, so that asking again about an attempt sends the
// same one.
func (p *payments) StartPayment(ctx context.Context, s fulfillment.ProviderStart) (fulfillment.ProviderPayment, error) {
	r := InitRequest{
		OrderID: s.ProviderOrderID, Amount: s.Amount.MinorUnits, Description: s.Description,
		NotificationURL: p.opts.NotificationURL,
	}
	if p.binds(s) {
		r.Recurrent, r.CustomerKey = true, s.CustomerRef
	}
	pay, err := p.client.Init(ctx, r)
	if err != nil {
		return fulfillment.ProviderPayment{}, p.refusal(err)
	}
	return providerPayment(pay), nil
}

// PaymentState calls GetState.
func (p *payments) PaymentState(ctx context.Context, paymentID string) (fulfillment.ProviderPayment, error) {
	pay, err := p.client.GetState(ctx, paymentID)
	if err != nil {
		return fulfillment.ProviderPayment{}, p.refusal(err)
	}
	return providerPayment(pay), nil
}

// refusal turns the bank's refusal into the domain's; any other error (no
// answer, or one that cannot be read) is returned as it is.
func (p *payments) refusal(err error) error {
	if errors.Is(err, ErrInvalidRequest) {
		// Nothing was sent, and the same request never will be.
		return &fulfillment.ProviderRefusal{Code: "not sent", Message: err.Error()}
	}
	var be *BankError
	if !errors.As(err, &be) {
		return err
	}
	return &fulfillment.ProviderRefusal{Code: be.Code, Message: be.Message,
		Duplicate: p.opts.DuplicateOrder(be.Code), PaymentID: be.PaymentID}
}

func providerPayment(p Payment) fulfillment.ProviderPayment {
	k := kindOf(p.Status, false)
	return fulfillment.ProviderPayment{
		Account: p.TerminalKey, ProviderOrderID: p.OrderID, PaymentID: p.PaymentID, Status: p.Status,
		Amount: fulfillment.Money{Currency: currency, MinorUnits: p.Amount}, URL: p.PaymentURL,
		Ended: k == fulfillment.EventAttemptCancelled || k == fulfillment.EventAttemptExpired ||
			k == fulfillment.EventRefunded || k == fulfillment.EventPartiallyRefunded,
		Held: held[p.Status],
	}
}

// PolledEvent is the event a GetState answer stands for, under the id
// "poll:TerminalKey:PaymentId:Status[:Amount]": a notification's id with a
// prefix, so that the answer and the notification of one status are two
// events, which the order's rules apply once. Its raw evidence is the
// answer's fields (no card data: GetState returns none). It is final once
// the payment is confirmed or ended. A partly refunded (or reversed)
// payment's event carries no amount: GetState's is the payment's.
func (p *payments) PolledEvent(pay fulfillment.ProviderPayment) (ev fulfillment.ProviderEvent, raw []byte, final bool, err error) {
	kopecks := strconv.FormatInt(pay.Amount.MinorUnits, 10)
	amount := fulfillment.MinorAmount(pay.Amount.MinorUnits, currency)
	if partial[pay.Status] {
		// GetState's Amount is the payment's, not what a partial refund or
		// reversal returned: the event says the payment is partly
		// refunded, not by how much (the notification does).
		amount = fulfillment.Amount{}
	}
	ev, err = event(p.ep, pollPrefix, paymentState{
		terminalKey: pay.Account, orderID: pay.ProviderOrderID, paymentID: pay.PaymentID, status: pay.Status,
		amount: amount, kopecks: kopecks,
	}, map[string]string{RefSource: "GetState"})
	if err != nil {
		return ev, nil, false, err
	}
	raw, err = json.Marshal(map[string]any{"Source": "GetState", "TerminalKey": pay.Account, "OrderId": pay.ProviderOrderID,
		"PaymentId": pay.PaymentID, "Status": pay.Status, "Amount": pay.Amount.MinorUnits})
	if err != nil {
		return ev, nil, false, err
	}
	final = ev.Kind != fulfillment.EventAttemptCreated && ev.Kind != fulfillment.EventOther
	return ev, raw, final, ev.Validate()
}

// pollPrefix starts the event id of a GetState answer.
const pollPrefix = "poll:"

// RefSource names, in an event's refs, the bank call that answered it.
const RefSource = "source"
