package storage_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// confirmation is a person's confirmation of message id.
func confirmation(id int64) fulfillment.DeliveryConfirmation {
	return fulfillment.DeliveryConfirmation{MessageID: id, Note: "shipping says it has it (ticket 42)", Actor: "ops", ActorDetail: "Ann"}
}

// A destination that got an uncertain message once, as a person confirmed
// with it: the message is delivered, the order completes once, with one
// order.fulfilled, and the message's item is resolved with the note.
// Two people confirming at once: one does it, the other is refused and
// changes nothing; so is a third, later.
func TestAConfirmedDeliveryCompletesItsOrderOnce(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := paidExternalOrder(t, s, "c-1", "p1")
	deliverNext(t, s, "licenses", fulfillment.OutcomeDelivered)
	m := deliverNext(t, s, "shipping", fulfillment.OutcomeUncertain)
	const fulfilledEvents = `SELECT count(*) FROM order_events WHERE order_id = $1 AND topic = 'order.fulfilled'`
	if n := count(t, conn, fulfilledEvents, order); n != 0 {
		t.Fatalf("%d order.fulfilled before the confirmation, want none", n)
	}

	var (
		wg      sync.WaitGroup
		errs    = make([]error, 2)
		results = make([]fulfillment.Delivery, 2)
	)
	for i := range errs {
		wg.Go(func() { results[i], errs[i] = s.DeliveryConfirm(ctx, confirmation(m.ID)) })
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
			if results[i].State != fulfillment.DeliveryDelivered {
				t.Errorf("confirmed message is %s, want delivered", results[i].State)
			}
		case !errors.Is(err, fulfillment.ErrFailedPrecondition):
			t.Errorf("concurrent confirmation: %v, want FailedPrecondition", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d confirmations took effect, want 1 (%v)", won, errs)
	}
	if _, err := s.DeliveryConfirm(ctx, confirmation(m.ID)); !errors.Is(err, fulfillment.ErrFailedPrecondition) {
		t.Errorf("confirming a delivered message: %v, want FailedPrecondition", err)
	}

	wantCounts(t, conn, []countCheck{
		{"order.fulfilled events", fulfilledEvents, 1},
		{"order fulfilled", `SELECT count(*) FROM orders WHERE id = $1 AND state = 'fulfilled'`, 1},
		{"order.fulfilled messages to crm", `SELECT count(*) FROM outbox_messages
			WHERE order_id = $1 AND topic = 'order.fulfilled' AND destination_id = 'crm'`, 1},
		{"shipping messages delivered", `SELECT count(*) FROM outbox_messages
			WHERE order_id = $1 AND destination_id = 'shipping' AND state = 'delivered'`, 1},
		{"attempts of the shipping message (none is added)", `SELECT count(*) FROM outbox_attempts a
			JOIN outbox_messages m ON m.id = a.message_id WHERE m.order_id = $1 AND m.destination_id = 'shipping'`, 1},
		{"items resolved as confirmed, by ops, with the note", `SELECT count(*) FROM reconciliation_items
			WHERE order_id = $1 AND kind = 'uncertain_delivery' AND state = 'resolved' AND resolution = 'confirmed_delivered'
				AND resolved_by = 'ops' AND resolved_by_detail = 'Ann' AND resolution_note LIKE 'shipping says%'`, 1},
		{"open items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1 AND state = 'open'`, 0},
	}, order)
	if got, wrong := stuck.rows(t, conn); got != "" || wrong != 0 {
		t.Errorf("stuck messages after the confirmation: %q (%d wrong), want none", got, wrong)
	}
}

// A message failed past its attempts keeps its work row, failed; confirmed,
// it has none left (a retry would find nothing to send), and its order
// completes when its other line was delivered.
func TestAConfirmedFailedMessageLeavesTheQueue(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := paidExternalOrder(t, s, "c-2", "p2")
	failed := failNext(t, s, "licenses")
	deliverNext(t, s, "shipping", fulfillment.OutcomeDelivered)
	if n := count(t, conn, `SELECT count(*) FROM orders WHERE id = $1 AND state = 'fulfilling'`, order); n != 1 {
		t.Fatalf("order not fulfilling with its licenses message failed")
	}
	if _, err := s.DeliveryConfirm(ctx, confirmation(failed.ID)); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, conn, []countCheck{
		{"work rows of the order's messages", `SELECT count(*) FROM outbox_work w JOIN outbox_messages m ON m.id = w.id
			WHERE m.order_id = $1 AND m.topic = 'fulfillment.requested'`, 0},
		{"order fulfilled", `SELECT count(*) FROM orders WHERE id = $1 AND state = 'fulfilled'`, 1},
		{"order.fulfilled events", `SELECT count(*) FROM order_events WHERE order_id = $1 AND topic = 'order.fulfilled'`, 1},
		{"failed_delivery items resolved as confirmed", `SELECT count(*) FROM reconciliation_items
			WHERE order_id = $1 AND kind = 'failed_delivery' AND resolution = 'confirmed_delivered'`, 1},
	}, order)
	if _, err := s.DeliveryRetry(ctx, failed.ID, "test", false); !errors.Is(err, fulfillment.ErrFailedPrecondition) {
		t.Errorf("retrying the confirmed message without resend: %v, want FailedPrecondition", err)
	}
}

// Only a failed or uncertain message is confirmed: a pending one (maybe
// being sent) is refused and changes nothing; an unknown id is not found.
func TestOnlyAStuckMessageIsConfirmed(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := paidExternalOrder(t, s, "c-3", "p3")
	var pending int64
	if err := conn.QueryRow(ctx, `SELECT id FROM outbox_messages WHERE order_id = $1 AND destination_id = 'shipping'`,
		order).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeliveryConfirm(ctx, confirmation(pending)); !errors.Is(err, fulfillment.ErrFailedPrecondition) {
		t.Errorf("confirming a pending message: %v, want FailedPrecondition", err)
	}
	if n := count(t, conn, `SELECT count(*) FROM outbox_messages WHERE order_id = $1 AND state = 'pending'`, order); n != 2 {
		t.Errorf("%d pending messages after a refused confirmation, want both", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM outbox_work w JOIN outbox_messages m ON m.id = w.id WHERE m.order_id = $1`, order); n != 2 {
		t.Errorf("%d work rows after a refused confirmation, want both", n)
	}
	if _, err := s.DeliveryConfirm(ctx, confirmation(1<<40)); !errors.Is(err, fulfillment.ErrNotFound) {
		t.Errorf("confirming an unknown message: %v, want NotFound", err)
	}
}

// A retry and a confirmation of one failed message at once: one of them
// takes effect and the other is refused, whichever comes first; neither
// deadlocks with the other (both lock the work row, then the message).
func TestARetryAndAConfirmationAtOnceTakeEffectOnce(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	for i := range 8 {
		// A message a retry made pending in an earlier round is older:
		// it may be the one claimed and failed here.
		paidExternalOrder(t, s, fmt.Sprintf("race-%d", i), fmt.Sprintf("pr-%d", i))
		failed := failNext(t, s, "licenses")
		id := failed.ID
		var retryErr, confirmErr error
		var wg sync.WaitGroup
		wg.Go(func() { _, retryErr = s.DeliveryRetry(ctx, id, "ops", false) })
		wg.Go(func() { _, confirmErr = s.DeliveryConfirm(ctx, confirmation(id)) })
		wg.Wait()
		for _, err := range []error{retryErr, confirmErr} {
			if err != nil && !errors.Is(err, fulfillment.ErrFailedPrecondition) {
				t.Fatalf("round %d: %v, want success or FailedPrecondition", i, err)
			}
		}
		if (retryErr == nil) == (confirmErr == nil) {
			t.Fatalf("round %d: retry %v, confirmation %v; want exactly one to take effect", i, retryErr, confirmErr)
		}
		state, work := "delivered", 0
		if retryErr == nil {
			state, work = "pending", 1
		}
		if n := count(t, conn, `SELECT count(*) FROM outbox_messages WHERE id = $1 AND state = $2`, id, state); n != 1 {
			t.Errorf("round %d: message not %s", i, state)
		}
		if n := count(t, conn, `SELECT count(*) FROM outbox_work WHERE id = $1`, id); n != work {
			t.Errorf("round %d: %d work rows, want %d", i, n, work)
		}
		// Confirmed, each of its items is (a message failed again after an
		// earlier round's retry has one per round); retried, none is.
		confirmed := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1 AND resolution = 'confirmed_delivered'`, id)
		open := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1 AND state = 'open'`, id)
		if work == 0 && (confirmed == 0 || open != 0) || work == 1 && confirmed != 0 {
			t.Errorf("round %d: %d items confirmed, %d open; want all confirmed, or none if retried", i, confirmed, open)
		}
	}
}
