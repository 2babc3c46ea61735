package storage_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// The batch writers against the real PostgreSQL: each benchmark gets a
// fresh migrated database from pgtest (make bench-micro runs them under
// rig/cmd/pgrun; go test alone starts a throwaway cluster in TestMain).

// benchStore opens a store with the service's defaults on a fresh
// database, and returns the database's URL too.
func benchStore(b *testing.B) (s *storage.Store, url string) {
	b.Helper()
	url = pgtest.DB(b)
	s, err := storage.Open(context.Background(), url, storage.Options{MaxConns: 30})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return s, url
}

// walPosition connects to the database at url and returns the connection
// and a function reading the cluster's WAL insert position, in bytes.
func walPosition(b *testing.B, url string) (conn *pgx.Conn, position func() int64) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn, func() int64 {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint").Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
}

// eachConcurrently runs do(0) … do(n-1) on workers goroutines, as concurrent
// callers would, and stops the benchmark on the first error.
func eachConcurrently(b *testing.B, workers, n int, do func(i int) error) {
	b.Helper()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range workers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if err := do(int(i - 1)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// benchBody is a Yolfi payment.confirmed as it arrives (the raw body the
// inbox keeps).
const benchBody = `{"id":"%s","type":"payment.confirmed","livemode":true,"orgId":"org_a","createdAt":"2026-11-29T10:15:30Z",` +
	`"data":{"paymentId":"pay_%[1]s","invoiceId":"inv_%[1]s","checkoutSessionId":"cs_2Lp7Wn","merchantOrderId":"%s",` +
	`"amount":"30.000000","token":"USDT","network":"TRON","txHash":"a3f1c9e07b","customer":{"clientReferenceId":"user_42"}}}`

// BenchmarkInboxInsert is group commit: 16 goroutines per core each insert
// distinct events, as concurrent webhooks do; ns/op is wall time per event
// (the inverse of throughput), not one insert's latency.
func BenchmarkInboxInsert(b *testing.B) {
	s, _ := benchStore(b)
	ctx := context.Background()
	var seq atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("evt_%d", seq.Add(1))
			r, err := s.InboxInsert(ctx, confirmedEvent(id, "m-1"), fmt.Appendf(nil, benchBody, id, "m-1"))
			if err != nil {
				b.Error(err)
				return
			}
			if r.Duplicate {
				b.Errorf("%s: duplicate", id)
				return
			}
		}
	})
}

// BenchmarkInboxClaimProcess is the processor's turn on a batch of 16
// confirmed payments, each of its own pending order (created beforehand):
// one claim and one InboxProcess transaction (orders fulfilled, licenses
// and credits granted, attempts and decisions recorded). ns/op is per
// batch of 16; inserting the events is outside the timer. WAL-B/event is
// the WAL the cluster wrote per event: for the inserts (insert-WAL-B/event)
// and for the claims and batches (process-WAL-B/event), machine-independent
// figures of the storage shape. With BENCH_WALRANGE set it prints where each
// batch's inserts, claim and processing start and end, for pg_waldump.
func BenchmarkInboxClaimProcess(b *testing.B) {
	const batch = 16
	s, url := benchStore(b)
	ctx := context.Background()

	// Orders for every event of the run, created concurrently.
	specs := make([]fulfillment.OrderSpec, b.N*batch)
	for i := range specs {
		specs[i] = spec(b, "org_a", fmt.Sprintf("m-%d", i+1))
	}
	eachConcurrently(b, 16, len(specs), func(i int) error {
		_, _, err := s.OrderCreate(ctx, specs[i])
		return err
	})

	_, lsn := walPosition(b, url)
	var insertWAL, processWAL int64
	b.ReportAllocs()
	b.ResetTimer()
	for n := range b.N {
		b.StopTimer()
		before := lsn()
		var ins sync.WaitGroup
		for i := range batch {
			ins.Add(1)
			go func() {
				defer ins.Done()
				order := n*batch + i + 1
				id := fmt.Sprintf("evt_%d", order)
				mo := fmt.Sprintf("m-%d", order)
				if _, err := s.InboxInsert(ctx, confirmedEvent(id, mo), fmt.Appendf(nil, benchBody, id, mo)); err != nil {
					b.Error(err)
				}
			}()
		}
		ins.Wait()
		mid := lsn()
		insertWAL += mid - before
		b.StartTimer()

		claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "bench", Limit: batch, Lease: time.Minute, MaxAttempts: 10})
		if err != nil || len(claims) != batch {
			b.Fatalf("claim = %d events, %v; want %d", len(claims), err, batch)
		}
		ids := make([]int64, len(claims))
		for i, c := range claims {
			ids[i] = c.ID
		}
		outs, err := s.InboxProcess(ctx, ids, "bench")
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		end := lsn()
		processWAL += end - mid
		if os.Getenv("BENCH_WALRANGE") != "" {
			fmt.Printf("WALRANGE %d %d %d\n", before, mid, end)
		}
		b.StartTimer()
		if n == 0 {
			b.StopTimer()
			for _, id := range ids {
				if d := outs[id].Decision; d != fulfillment.DecisionFulfilled {
					b.Fatalf("event %d: decision %s, want fulfilled", id, d)
				}
			}
			b.StartTimer()
		}
	}
	events := float64(b.N * batch)
	b.ReportMetric(float64(insertWAL)/events, "insert-WAL-B/event")
	b.ReportMetric(float64(processWAL)/events, "process-WAL-B/event")
}

// BenchmarkOutboxDeliver is a dispatcher's turn on a batch of 32
// fulfillment.requested messages to one idempotent destination, each of
// its own paid order with one external line (paid beforehand, outside the
// timer): one claim, one load and one OutboxRecord transaction recording
// every message delivered and completing their orders. ns/op is per batch;
// WAL-B/delivery is the WAL the cluster wrote per message for the claim,
// load and record, a machine-independent figure of the outbox's shape. With
// BENCH_WALRANGE set it prints where each batch's WAL starts, for
// pg_waldump to break the batch down by relation.
func BenchmarkOutboxDeliver(b *testing.B) {
	const batch = 32
	s, url := benchStore(b)
	ctx := context.Background()
	n := b.N * batch
	eachConcurrently(b, 8, n, func(i int) error {
		mo := fmt.Sprintf("x-%d", i+1)
		spec, err := fulfillment.OrderDraft{
			OrgID: "org_a", Environment: "live", MerchantOrderID: mo,
			Lines: []fulfillment.LineDraft{
				{SKU: "key-server", Kind: "external", Quantity: 1, Currency: "USD", MinorUnits: 3000, Destination: "licenses"},
			},
			Settlement: &fulfillment.SettlementDraft{Token: "USDT", Network: "TRON", Amount: "30.000000"},
		}.Validate()
		if err == nil {
			_, _, err = s.OrderCreate(ctx, spec)
		}
		if err == nil {
			id := fmt.Sprintf("evt_%d", i+1)
			_, err = s.InboxInsert(ctx, confirmedEvent(id, mo), fmt.Appendf(nil, benchBody, id, mo))
		}
		return err
	})
	for {
		claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "bench", Limit: 64, Lease: time.Minute, MaxAttempts: 10})
		if err != nil {
			b.Fatal(err)
		}
		if len(claims) == 0 {
			break
		}
		ids := make([]int64, len(claims))
		for i, c := range claims {
			ids[i] = c.ID
		}
		if _, err := s.InboxProcess(ctx, ids, "bench"); err != nil {
			b.Fatal(err)
		}
	}

	conn, lsn := walPosition(b, url)
	q := s.OutboxQueue("licenses")
	var wal int64
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		before := lsn()
		claims, err := q.Claim(ctx, worker.ClaimParams{Owner: "bench", Limit: batch, Lease: time.Minute, MaxAttempts: 10})
		if err != nil || len(claims) != batch {
			b.Fatalf("claim = %d messages, %v; want %d", len(claims), err, batch)
		}
		ids := make([]int64, len(claims))
		for i, c := range claims {
			ids[i] = c.ID
		}
		msgs, err := s.OutboxLoad(ctx, ids, "bench")
		if err != nil || len(msgs) != batch {
			b.Fatalf("load = %d messages, %v; want %d", len(msgs), err, batch)
		}
		attempts := make([]fulfillment.MessageAttempt, len(msgs))
		for i, m := range msgs {
			attempts[i] = fulfillment.MessageAttempt{ID: m.ID, DeliveryAttempt: fulfillment.DeliveryAttempt{
				Outcome: fulfillment.OutcomeDelivered, Status: 204, StartedAt: time.Now()}}
		}
		if lost, err := s.OutboxRecord(ctx, "bench", attempts); err != nil || len(lost) > 0 {
			b.Fatalf("record: lost %v, %v", lost, err)
		}
		b.StopTimer()
		wal += lsn() - before
		if os.Getenv("BENCH_WALRANGE") != "" {
			fmt.Printf("WALRANGE %d\n", before)
		}
		b.StartTimer()
	}
	b.StopTimer()
	var undelivered int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM orders WHERE state <> 'fulfilled'`).Scan(&undelivered); err != nil {
		b.Fatal(err)
	}
	if undelivered != n-b.N*batch {
		b.Fatalf("%d orders not fulfilled, want %d", undelivered, n-b.N*batch)
	}
	b.ReportMetric(float64(wal)/float64(b.N*batch), "WAL-B/delivery")
}
