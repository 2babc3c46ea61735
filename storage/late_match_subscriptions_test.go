package storage_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
	"github.com/jackc/pgx/v5"
)

// Subscription events that arrive before their subscription: a renewal
// and a cancellation of sub_1 delivered before its first payment are
// decided unmatched; the first payment creates the subscription and, in
// the same transaction, queues them again; they then apply once, in the
// order they came, whichever of the two came first: two periods paid, the
// subscription cancelled at the end of the second. The renewal's item is
// resolved matched_later with the subscription, both events' replays and
// decisions say they came first, and a replay by hand or a redelivery
// changes nothing. An event older than the window and one of another org
// stay unmatched.
func TestLateMatchSubscriptionEventsThatCameFirst(t *testing.T) {
	t.Parallel()
	renewal := subEvent("evt_renewal", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_2")
	cancel := subEvent("evt_cancel", "sub_1", fulfillment.EventSubscriptionCancelled, subJan1.AddDate(0, 1, 10), "")
	for _, tc := range []struct {
		name  string
		early []fulfillment.ProviderEvent
		// decided is what the early events are decided when queued
		// again, in the order they came.
		decided string
	}{
		{"renewal then cancellation", []fulfillment.ProviderEvent{renewal, cancel}, "renewed,subscription_cancelled"},
		// The cancellation occurred after the renewal: the renewal was
		// paid before it, and pays its period; the subscription stays
		// cancelled.
		{"cancellation then renewal", []fulfillment.ProviderEvent{cancel, renewal}, "subscription_cancelled,renewed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, conn := newOutboxStore(t)
			ctx := context.Background()
			subscriptionOrder(t, s, "m-1")
			old := subEvent("evt_old", "sub_1", fulfillment.EventSubscriptionOverdue, subJan1.AddDate(0, 0, 5), "")
			otherOrg := subEvent("evt_other_org", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_2")
			otherOrg.OrgID = "org_b"
			var ids []int64
			for _, ev := range append(append([]fulfillment.ProviderEvent{}, tc.early...), old, otherOrg) {
				r, err := s.InboxInsert(ctx, ev, []byte(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, r.ID)
				if got := processAll(t, s, 1); got != "unmatched" {
					t.Fatalf("%s before its subscription: %s, want unmatched", ev.EventID, got)
				}
			}
			early := ids[:len(tc.early)]
			if _, err := conn.Exec(ctx, "UPDATE inbox_events SET received_at = now() - interval '8 days' WHERE event_id = 'evt_old'"); err != nil {
				t.Fatal(err)
			}
			if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment' AND state = 'open'"); n != 2 {
				t.Fatalf("%d open unmatched_payment items, want the two renewals'", n)
			}

			if got := deliver(t, s, firstPayment("evt_1", "sub_1", "m-1")); got != "fulfilled" {
				t.Fatalf("the first payment: %s", got)
			}
			if n := count(t, conn, "SELECT count(*) FROM inbox_work WHERE state = 'pending' AND id = ANY($1)", early); n != 2 {
				t.Fatalf("%d of the early events queued by the subscription's creation, want 2", n)
			}
			if n := count(t, conn, `SELECT count(*) FROM reconciliation_items i JOIN subscriptions s ON s.id = i.subscription_id
				WHERE i.inbox_event_id = ANY($1) AND i.state = 'resolved' AND i.resolution = 'matched_later'
					AND i.resolved_by = $2 AND s.provider_subscription_id = 'sub_1'`, early, storage.LateMatchActor); n != 1 {
				t.Errorf("%d early items resolved as matched_later with the subscription, want the renewal's", n)
			}
			if n := count(t, conn, `SELECT count(*) FROM inbox_replays WHERE inbox_event_id = ANY($1) AND replayed_by = $2
				AND previous_state = 'unmatched' AND replayed_by_detail LIKE 'late match: subscription sub_1 %'`,
				early, storage.LateMatchActor); n != 2 {
				t.Errorf("%d early events' timelines show they were queued again when the subscription came, want 2", n)
			}
			if got := processAll(t, s, 2); got != tc.decided {
				t.Fatalf("the early events, processed again: %s, want %s", got, tc.decided)
			}
			// (The item is the renewal's, resolved.)
			want := subRow{State: "cancelled", Periods: 2, End: subJan1.AddDate(0, 2, 0), Renewed: 2, Items: 1}
			if got := readSub(t, conn, "sub_1"); got != want {
				t.Fatalf("after the early events %+v, want %+v", got, want)
			}
			if n := count(t, conn, `SELECT count(*) FROM inbox_events WHERE id = ANY($1) AND state = 'processed'
				AND decision_reason LIKE '%(late match: subscription sub_1 was created after this event)'`, early); n != 2 {
				t.Errorf("%d early events' decisions say they came first, want 2", n)
			}

			// Replayed by hand, and delivered again: nothing changes.
			for _, id := range early {
				if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: id, Actor: "admin"}); err != nil {
					t.Fatal(err)
				}
			}
			if got := processAll(t, s, 2); strings.Contains(got, "renewed") || strings.Contains(got, "subscription_cancelled,") {
				t.Errorf("replayed by hand: %s, want nothing applied", got)
			}
			for _, ev := range tc.early {
				if r, err := s.InboxInsert(ctx, ev, []byte(`{}`)); err != nil || !r.Duplicate {
					t.Errorf("%s delivered again: %+v, %v; want a duplicate", ev.EventID, r, err)
				}
			}
			if got := readSub(t, conn, "sub_1"); got != want {
				t.Errorf("after the replays %+v, want %+v", got, want)
			}
			if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE state = 'unmatched' AND event_id IN ('evt_old', 'evt_other_org')"); n != 2 {
				t.Errorf("%d of the old and the other org's events still unmatched, want 2", n)
			}
			if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment' AND state = 'open'"); n != 1 {
				t.Errorf("%d unmatched_payment items open, want the other org's", n)
			}
			if n := count(t, conn, "SELECT count(*) FROM inbox_work"); n != 0 {
				t.Errorf("%d work rows left", n)
			}
		})
	}
}

// Early events in the batch that creates their subscription: decided
// unmatched in it (the subscription comes after them), and queued again at
// its end, in its transaction. A second early renewal of the same bill,
// under another event id, is found applied: it keeps no unmatched decision.
func TestLateMatchSubscriptionEventsInTheCreatingBatch(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	subscriptionOrder(t, s, "m-1")
	renewal := subEvent("evt_renewal", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_2")
	again := subEvent("evt_renewal_again", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_2")
	cancel := subEvent("evt_cancel", "sub_1", fulfillment.EventSubscriptionCancelled, subJan1.AddDate(0, 1, 10), "")
	if got := deliver(t, s, renewal, again, cancel, firstPayment("evt_1", "sub_1", "m-1")); got != "unmatched,unmatched,unmatched,fulfilled" {
		t.Fatalf("the batch: %s", got)
	}
	if got := processAll(t, s, 3); got != "renewed,already_applied,subscription_cancelled" {
		t.Fatalf("the early events, processed again: %s", got)
	}
	// (The item is the renewal's, resolved: the two events of one
	// payment share it.)
	want := subRow{State: "cancelled", Periods: 2, End: subJan1.AddDate(0, 2, 0), Renewed: 2, Items: 1}
	if got := readSub(t, conn, "sub_1"); got != want {
		t.Errorf("after the early events %+v, want %+v", got, want)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE decision = 'unmatched' OR state <> 'processed'"); n != 0 {
		t.Errorf("%d events left unmatched or unprocessed", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment' AND state = 'resolved'
		AND resolution = 'matched_later'`); n != 1 || count(t, conn, "SELECT count(*) FROM reconciliation_items") != 1 {
		t.Errorf("%d renewal items resolved as matched_later, want the one, and no other item", n)
	}
}

// A subscription created by hand (CreateSubscription) queues the events
// that came before it too: an early renewal pays its first period.
func TestLateMatchSubscriptionCreatedByHand(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	renewal := subEvent("evt_renewal", "sub_1", fulfillment.EventPaymentConfirmed, subJan1, "inv_1")
	if got := deliver(t, s, renewal); got != "unmatched" {
		t.Fatalf("the renewal: %s", got)
	}
	ref := fulfillment.SubscriptionRef{OrgID: "org_a", Environment: fulfillment.EnvLive, Provider: fulfillment.ProviderYolfi,
		ProviderSubscriptionID: "sub_1", CustomerRef: "user_42", PlanID: subPlan.ID}
	if _, created, err := s.SubscriptionCreate(ctx, ref); err != nil || !created {
		t.Fatalf("create = %v, %v", created, err)
	}
	if _, created, err := s.SubscriptionCreate(ctx, ref); err != nil || created {
		t.Fatalf("create again = %v, %v", created, err)
	}
	if got := processAll(t, s, 1); got != "renewed" {
		t.Fatalf("the renewal, processed again: %s", got)
	}
	want := subRow{State: "active", Periods: 1, End: subJan1.AddDate(0, 1, 0), Renewed: 1, Items: 1}
	if got := readSub(t, conn, "sub_1"); got != want {
		t.Errorf("after the renewal %+v, want %+v (its item resolved)", got, want)
	}
}

// An early event decided unmatched while another transaction creates its
// subscription: neither sees what the other has not committed, yet the
// event is queued again (by the creator, or by the decider itself) and
// applied. Each round races the decision of a renewal with the batch of
// the first payment that creates the subscription.
func TestLateMatchSubscriptionRacesItsCreation(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	const rounds = 20
	for i := range rounds {
		sub, order := fmt.Sprintf("sub_%d", i), fmt.Sprintf("m-%d", i)
		subscriptionOrder(t, s, order)
		decideTogether(t, s, conn,
			subEvent("evt_renewal_"+sub, sub, fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_"+sub+"_2"),
			firstPayment("evt_first_"+sub, sub, order))
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE state <> 'processed'"); n != 0 {
		t.Errorf("%d events left unmatched or unprocessed", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM subscription_periods"); n != 2*rounds {
		t.Errorf("%d periods paid, want %d", n, 2*rounds)
	}
}

// decideTogether stores a and b, claims them, and decides each in a batch
// of its own at the same time, as two workers would; then it processes
// what they queued again.
func decideTogether(t *testing.T, s *storage.Store, conn *pgx.Conn, a, b fulfillment.ProviderEvent) {
	t.Helper()
	ctx := context.Background()
	next := make(chan int64, 2)
	for _, ev := range []fulfillment.ProviderEvent{a, b} {
		r, err := s.InboxInsert(ctx, ev, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		next <- r.ID
	}
	if claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10}); err != nil ||
		len(claims) != 2 {
		t.Fatalf("claim = %v, %v; want 2 events", claims, err)
	}
	concurrently(2, func() {
		if _, err := s.InboxProcess(ctx, []int64{<-next}, "w"); err != nil {
			t.Error(err)
		}
	})
	if n := count(t, conn, "SELECT count(*) FROM inbox_work WHERE state = 'pending'"); n > 0 {
		processAll(t, s, n)
	}
}

// Migration 030 adds the partial index of unmatched events by
// subscription, and rolls back without a trace. (Migration 035 moves it to
// the unresolved events.)
func TestMigration030LateMatchSubscriptions(t *testing.T) {
	t.Parallel()
	_, conn := newOutboxStore(t)
	ctx := context.Background()
	index := func() int {
		return count(t, conn, "SELECT count(*) FROM pg_indexes WHERE indexname = 'inbox_events_unmatched_subscription_idx'")
	}
	m, v := migrator(t, conn, "_late_match_subscriptions.sql")
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatalf("migrating down to %d: %v", v, err)
	}
	if index() != 1 {
		t.Fatal("no index of unmatched events by subscription")
	}
	if err := m.MigrateTo(ctx, v-1); err != nil {
		t.Fatalf("migrating down: %v", err)
	}
	if index() != 0 {
		t.Errorf("the index is still there at version %d", v-1)
	}
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatalf("migrating up again: %v", err)
	}
	if index() != 1 {
		t.Errorf("no index at version %d", v)
	}
}
