package e2e_test

import (
	"strings"
	"testing"
	"time"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// unidentified builds a payment.confirmed for merchantOrderID of the
// expected settlement that names neither an invoice nor a payment: nothing
// in it tells this payment from another one of the same order.
func unidentified(merchantOrderID string) yolfi.Payload {
	live := true
	return yolfi.Payload{
		ID: yolfi.NewID("evt_"), Type: yolfi.TypePaymentConfirmed, Livemode: &live, OrgID: orgA,
		CreatedAt: time.Now().UTC().Format(time.RFC3339),
		Data: yolfi.PayloadData{
			MerchantOrderID: merchantOrderID,
			Amount:          "25.000000", Token: "USDT", Network: "TRON", TxHash: "0xabc",
		},
	}
}

// announceAgain sends p under a new event id, as a provider announcing the
// same payment again does, and returns the copy.
func (s *stack) announceAgain(t *testing.T, p yolfi.Payload) yolfi.Payload {
	t.Helper()
	p.ID = yolfi.NewID("evt_")
	s.sendOK(t, p)
	s.settle(t)
	return p
}

// paidRefs reads the refs of the payment that paid an order, "<NULL>" for
// NULL, and whether the order is paid at all.
func (s *stack) paidRefs(t *testing.T, orderID string) (attemptRef, paymentID string, paid bool) {
	t.Helper()
	err := s.db.QueryRow(t.Context(), `
		SELECT coalesce(paid_attempt_ref, '<NULL>'), coalesce(paid_payment_id, '<NULL>'), paid_at IS NOT NULL
		FROM orders WHERE id = $1`, orderID).Scan(&attemptRef, &paymentID, &paid)
	if err != nil {
		t.Fatal(err)
	}
	return attemptRef, paymentID, paid
}

// A payment that carries neither an invoice nor a payment id fulfills its
// order once; announced again under new event ids (or followed by an
// identified payment) it cannot be told apart from the one that paid, so it
// opens one unidentified_payment item for the order, never extra_payment.
func TestUnidentifiedPaymentAnnouncedAgain(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	order := s.createOrder(t, "live", "unid-1")
	first := unidentified("unid-1")
	s.sendOK(t, first)
	s.settle(t)

	got := s.effects(t, order.GetId())
	if got.State != "fulfilled" || got.Licenses != 2 || got.Credits != 1 || len(got.Items) != 0 {
		t.Fatalf("after the payment: %v; want fulfilled, 2 licenses, 1 credit, no items", got)
	}
	if ref, pay, paid := s.paidRefs(t, order.GetId()); !paid || ref != "<NULL>" || pay != "<NULL>" {
		t.Errorf("paid refs = %q, %q (paid %v); want NULL, NULL on a paid order", ref, pay, paid)
	}

	for range 3 {
		s.announceAgain(t, first)
	}
	s.sendOK(t, first) // and a plain redelivery
	s.settle(t)
	got = s.effects(t, order.GetId())
	if got.State != "fulfilled" || got.Licenses != 2 || got.Credits != 1 {
		t.Errorf("after three announcements: %v; want fulfilled once", got)
	}
	if got.Items["unidentified_payment"] != 1 || got.Items["extra_payment"] != 0 || len(got.Items) != 1 {
		t.Errorf("items = %v; want exactly one unidentified_payment, no extra_payment", got.Items)
	}
	if d := s.decisions(t, order.GetId()); d != "fulfilled,unidentified_payment,unidentified_payment,unidentified_payment" {
		t.Errorf("decisions = %s", d)
	}

	// An identified payment after an unidentifiable one may be the same
	// money: it joins the order's one item.
	identified := event(yolfi.TypePaymentConfirmed, "unid-1", "inv_unid_1")
	s.sendOK(t, identified)
	s.settle(t)
	s.announceAgain(t, identified)
	got = s.effects(t, order.GetId())
	if got.Licenses != 2 || got.Credits != 1 || got.Items["unidentified_payment"] != 1 || len(got.Items) != 1 {
		t.Errorf("after an identified payment: %v; want one unidentified_payment item only", got)
	}
	if ref, pay, _ := s.paidRefs(t, order.GetId()); ref != "<NULL>" || pay != "<NULL>" {
		t.Errorf("paid refs = %q, %q after later payments; want NULL, NULL", ref, pay)
	}
	if n := s.count(t, "SELECT count(*) FROM orders WHERE paid_attempt_ref = '' OR paid_payment_id = ''"); n != 0 {
		t.Errorf("%d orders store an empty paid ref", n)
	}

	// Listed under its own kind, saying what to check.
	resp, err := s.client.ListReconciliationItems(authed(orgAToken), &fulfillmentv1.ListReconciliationItemsRequest{
		Kind: "unidentified_payment", OrderId: order.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if items := resp.GetItems(); len(items) != 1 || !strings.Contains(items[0].GetDetail(), "cannot be told apart") {
		t.Errorf("ListReconciliationItems(unidentified_payment) = %v", items)
	}
}

// An order paid by an identified payment, then confirmations that identify
// nothing: one unidentified_payment item, no extra_payment. The identified
// payment announced again is still already_applied.
func TestUnidentifiedPaymentAfterIdentified(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	order := s.createOrder(t, "live", "unid-2")
	paying := event(yolfi.TypePaymentConfirmed, "unid-2", "inv_unid_2")
	s.sendOK(t, paying)
	s.settle(t)
	if ref, pay, paid := s.paidRefs(t, order.GetId()); !paid || ref != "inv_unid_2" || pay != "pay_inv_unid_2" {
		t.Errorf("paid refs = %q, %q (paid %v); want inv_unid_2, pay_inv_unid_2", ref, pay, paid)
	}

	s.sendOK(t, unidentified("unid-2"))
	s.settle(t)
	s.sendOK(t, unidentified("unid-2"))
	s.settle(t)
	s.announceAgain(t, paying)

	got := s.effects(t, order.GetId())
	if got.State != "fulfilled" || got.Licenses != 2 || got.Credits != 1 {
		t.Errorf("effects: %v; want fulfilled once", got)
	}
	if got.Items["unidentified_payment"] != 1 || got.Items["extra_payment"] != 0 || len(got.Items) != 1 {
		t.Errorf("items = %v; want exactly one unidentified_payment, no extra_payment", got.Items)
	}
	if d := s.decisions(t, order.GetId()); d != "fulfilled,unidentified_payment,unidentified_payment,already_applied" {
		t.Errorf("decisions = %s", d)
	}
}

// A checkout session alone does not identify a payment (one checkout may be
// paid twice): the paying refs are NULL, and the session's payment
// announced again is unidentified_payment, not extra_payment.
func TestCheckoutSessionDoesNotIdentifyPayment(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	order := s.createOrder(t, "live", "unid-3")
	p := unidentified("unid-3")
	p.Data.CheckoutSessionID = "cs_unid_3"
	s.sendOK(t, p)
	s.settle(t)
	if ref, pay, paid := s.paidRefs(t, order.GetId()); !paid || ref != "<NULL>" || pay != "<NULL>" {
		t.Errorf("paid refs = %q, %q (paid %v); want NULL, NULL", ref, pay, paid)
	}
	s.announceAgain(t, p)
	s.announceAgain(t, p)
	got := s.effects(t, order.GetId())
	if got.State != "fulfilled" || got.Licenses != 2 || got.Credits != 1 || got.Attempts != 1 {
		t.Errorf("effects: %v; want fulfilled once, one attempt", got)
	}
	if got.Items["unidentified_payment"] != 1 || len(got.Items) != 1 {
		t.Errorf("items = %v; want exactly one unidentified_payment", got.Items)
	}
}

// The payment that paid, announced again with fewer refs: its payment id
// alone still names it (already applied); its invoice alone does not (the
// invoice may have been paid twice), so that is one unidentified_payment
// item — and neither is ever an extra_payment.
func TestPaymentAnnouncedAgainWithFewerRefs(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	order := s.createOrder(t, "live", "fewer-1")
	paying := event(yolfi.TypePaymentConfirmed, "fewer-1", "inv_fewer")
	s.sendOK(t, paying)
	s.settle(t)

	byPayment := paying
	byPayment.Data.InvoiceID = ""
	byPayment = s.announceAgain(t, byPayment)
	byInvoice := paying
	byInvoice.Data.PaymentID = ""
	byInvoice = s.announceAgain(t, byInvoice)
	s.announceAgain(t, byInvoice)

	got := s.effects(t, order.GetId())
	if got.State != "fulfilled" || got.Licenses != 2 || got.Credits != 1 ||
		got.Items["extra_payment"] != 0 || got.Items["unidentified_payment"] != 1 {
		t.Errorf("%v; want fulfilled once, no extra_payment, one unidentified_payment", got)
	}
	if d := s.decisions(t, order.GetId()); d != "fulfilled,already_applied,unidentified_payment,unidentified_payment" {
		t.Errorf("decisions = %s", d)
	}
}
