package fakebank

import (
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/fulfillplatform/fulfillment/ingest/tbank"
)

// Errors of the payment methods.
var (
	// ErrNotFound means no payment has the PaymentId.
	ErrNotFound = errors.New("no such payment")
	// ErrTransition means the payment's status (or what is left of its
	// amount) does not allow the operation.
	ErrTransition = errors.New("the payment's status does not allow the operation")
)

// Payment is a payment as the fake keeps it.
type Payment struct {
	PaymentID, OrderID, Status string
	// Amount is the amount at Init, in kopecks; Remaining is what is left
	// once reversals and refunds are taken off.
	Amount, Remaining int64
	// TwoStage payments wait in AUTHORIZED for Confirm.
	TwoStage bool
	// Recurrent payments (Init's Recurrent Y) bind the payer's card once
	// authorized: RebillID names the binding (Charge), and their
	// notifications carry it from then on.
	Recurrent bool
	RebillID  string
	// CustomerKey is Init's (required with Recurrent); the payment's
	// notifications carry it, as the bank's do.
	CustomerKey string
	// ChargeOf is the binding (RebillId) a recurrent charge was made with
	// (Charge); "" for a payment made through Init.
	ChargeOf                                 string
	Description, NotificationURL, PaymentURL string
	Data                                     map[string]string
}

// Payments returns every payment, in the order they were created.
func (b *Bank) Payments() []Payment {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Payment, 0, len(b.ids))
	for _, id := range b.ids {
		out = append(out, b.payments[id].clone())
	}
	return out
}

// Payment returns the payment paymentID, and whether there is one.
func (b *Bank) Payment(paymentID string) (Payment, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.payments[paymentID]
	if p == nil {
		return Payment{}, false
	}
	return p.clone(), true
}

func (p *Payment) clone() Payment {
	c := *p
	c.Data = maps.Clone(p.Data)
	return c
}

// Pay pays a NEW payment, as the payer would on its page: it becomes
// AUTHORIZED, then at once CONFIRMED unless it is two-stage (or the bank
// confirms later: Options.ConfirmLater). Each status is
// notified.
func (b *Bank) Pay(paymentID string) error {
	return b.change(paymentID, func(p *Payment) error {
		if p.Status != tbank.StatusNew {
			return transition(p, "pay")
		}
		b.moveLocked(p, tbank.StatusAuthorized, p.Remaining, CodeOK)
		if !p.TwoStage && !b.opts.ConfirmLater {
			b.moveLocked(p, tbank.StatusConfirmed, p.Remaining, CodeOK)
		}
		return nil
	})
}

// ErrNoBinding is returned by Charge for a RebillId the bank never issued.
var ErrNoBinding = errors.New("no such card binding")

// Charge charges the card binding rebillID again, as the merchant's billing
// does each period (Init under a new orderID, then Charge): a new payment
// of amount kopecks, AUTHORIZED and then CONFIRMED at once, each notified
// with the RebillId to the terminal's NotificationURL. It returns the new
// payment's PaymentId.
func (b *Bank) Charge(rebillID, orderID string, amount int64) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.bindings[rebillID]; !ok {
		return "", fmt.Errorf("%w: %s", ErrNoBinding, rebillID)
	}
	if _, dup := b.byOrder[orderID]; dup || orderID == "" || amount <= 0 {
		return "", fmt.Errorf("%w: a charge needs an OrderId of its own and a positive amount", ErrTransition)
	}
	id := strconv.FormatInt(b.nextID, 10)
	b.nextID++
	p := &Payment{PaymentID: id, OrderID: orderID, Status: tbank.StatusNew, Amount: amount, Remaining: amount,
		RebillID: rebillID, ChargeOf: rebillID}
	b.payments[id] = p
	b.byOrder[orderID] = id
	b.ids = append(b.ids, id)
	b.moveLocked(p, tbank.StatusAuthorized, amount, CodeOK)
	b.moveLocked(p, tbank.StatusConfirmed, amount, CodeOK)
	return id, nil
}

// Decline refuses a NEW payment, as a declined card would: it becomes
// REJECTED, notified with Success false and CodeDeclined.
func (b *Bank) Decline(paymentID string) error {
	return b.change(paymentID, func(p *Payment) error {
		if p.Status != tbank.StatusNew {
			return transition(p, "decline")
		}
		b.moveLocked(p, tbank.StatusRejected, p.Amount, CodeDeclined)
		return nil
	})
}

// Confirm confirms an AUTHORIZED payment (CONFIRMED): a two-stage one, or
// one the bank confirms later (Options.ConfirmLater). Confirming
// a CONFIRMED payment again succeeds and changes nothing.
func (b *Bank) Confirm(paymentID string) error {
	return b.change(paymentID, func(p *Payment) error {
		switch p.Status {
		case tbank.StatusConfirmed:
			return nil
		case tbank.StatusAuthorized, tbank.StatusPartialReversed:
			b.moveLocked(p, tbank.StatusConfirmed, p.Remaining, CodeOK)
			return nil
		}
		return transition(p, "confirm")
	})
}

// Cancel returns amount kopecks of a payment (0: all that remains): a NEW
// payment becomes CANCELED (whole amount only), an authorized one REVERSED
// or PARTIAL_REVERSED, a confirmed one REFUNDED or PARTIAL_REFUNDED. The
// notification's Amount is the amount returned.
func (b *Bank) Cancel(paymentID string, amount int64) error {
	return b.change(paymentID, func(p *Payment) error {
		if amount == 0 {
			amount = p.Remaining
		}
		if amount < 0 || amount > p.Remaining {
			return fmt.Errorf("%w: cancel %d of the %d kopecks left of payment %s", ErrTransition, amount, p.Remaining, p.PaymentID)
		}
		partial := amount < p.Remaining
		var status string
		switch p.Status {
		case tbank.StatusNew:
			status = tbank.StatusCanceled
			if partial {
				return transition(p, "cancel part of")
			}
		case tbank.StatusAuthorized, tbank.StatusPartialReversed:
			status = pick(partial, tbank.StatusPartialReversed, tbank.StatusReversed)
		case tbank.StatusConfirmed, tbank.StatusPartialRefunded:
			status = pick(partial, tbank.StatusPartialRefunded, tbank.StatusRefunded)
		default:
			return transition(p, "cancel")
		}
		p.Remaining -= amount
		b.moveLocked(p, status, amount, CodeOK)
		return nil
	})
}

func pick(partial bool, ifPartial, otherwise string) string {
	if partial {
		return ifPartial
	}
	return otherwise
}

func transition(p *Payment, what string) error {
	return fmt.Errorf("%w: cannot %s payment %s in status %s", ErrTransition, what, p.PaymentID, p.Status)
}

// change applies f to the payment paymentID under the lock.
func (b *Bank) change(paymentID string, f func(p *Payment) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.payments[paymentID]
	if p == nil {
		return fmt.Errorf("%w: %s", ErrNotFound, paymentID)
	}
	return f(p)
}
