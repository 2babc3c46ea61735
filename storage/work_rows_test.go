package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/worker"
)

// A queued event's work row does not hold its event by a foreign key
// (migration 036: the key's check locked every stored event again, a WAL
// record per webhook). An event deleted by hand while queued leaves its
// work row, which its next claim deletes, processing nothing; the down
// migration drops such rows before it gives the key back.
func TestWorkRowOfADeletedEventIsDroppedByItsClaim(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", "w-1")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gone", "kept"} {
		if _, err := s.InboxInsert(ctx, confirmedEvent(id, "w-1"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, `DELETE FROM inbox_events WHERE event_id = 'gone'`); err != nil {
		t.Fatal(err)
	}
	m, v := migratedBefore(t, conn, "_fewer_row_checks.sql")
	if n := count(t, conn, `SELECT count(*) FROM inbox_work`); n != 1 {
		t.Errorf("at version %d: %d work rows, want the kept event's", v-1, n)
	}
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM inbox_events WHERE event_id = 'kept'`); err != nil {
		t.Fatal(err)
	}
	claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v; want the deleted event's work row", claims, err)
	}
	outs, err := s.InboxProcess(ctx, []int64{claims[0].ID}, "w")
	if err != nil || len(outs) != 0 {
		t.Fatalf("process = %v, %v; want nothing processed", outs, err)
	}
	if n := count(t, conn, `SELECT count(*) FROM inbox_work`); n != 0 {
		t.Errorf("%d work rows left, want none", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM payment_attempts`); n != 0 {
		t.Errorf("%d payment attempts, want none", n)
	}
}
