package loadgen

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/outbox"
	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// Direct POSTs reach a real receiver once each, and Arrivals sees every
// key once: what the outbox phase's baseline and its timing rest on.
func TestRunDirectArrivals(t *testing.T) {
	t.Parallel()
	secret, err := stdwebhooks.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	arr := NewArrivals()
	rcv := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{secret}, Idempotent: true, Plan: arr.Plan})
	msgs := make([]outbox.Message, 50)
	keys := make([]string, len(msgs))
	for i := range msgs {
		keys[i] = fmt.Sprintf("key_%d", i)
		msgs[i] = outbox.Message{Key: keys[i], Payload: []byte(`{"type":"fulfillment.requested"}`)}
	}
	d := outbox.Destination{URL: rcv.URL(), Secrets: []stdwebhooks.Secret{secret}, Idempotent: true, Timeout: 10 * time.Second}
	res := RunDirect(context.Background(), outbox.NewSender(), d, msgs, 4, time.Minute)
	if res.OK != len(msgs) || res.Non200() != 0 {
		t.Fatalf("direct POSTs: %d answered 200, %d not; want %d and 0", res.OK, res.Non200(), len(msgs))
	}
	times, missing := arr.Times(append(keys, "never-sent"))
	if len(times) != len(msgs) || missing != 1 || arr.Repeats() != 0 || rcv.TotalEffects() != len(msgs) {
		t.Errorf("arrivals: %d, missing %d (want 1), repeats %d; receiver effects %d", len(times), missing, arr.Repeats(), rcv.TotalEffects())
	}
	first, _ := arr.Times(keys[:1])
	lags, missing := arr.Lags([]string{"never-sent", keys[0]}, []time.Time{time.Now(), first[0].Add(-time.Second)})
	if len(lags) != 1 || lags[0] != time.Second || missing != 1 {
		t.Errorf("lags: %v, missing %d; want [1s] and one missing", lags, missing)
	}
}

// SteadyRate counts the middle 80% of the times over the time they took.
func TestSteadyRate(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	var ts []time.Time
	for i := range 101 { // one every 10 ms, then a straggler
		ts = append(ts, t0.Add(time.Duration(i)*10*time.Millisecond))
	}
	ts = append(ts, t0.Add(time.Hour))
	// 10th percentile: index 10 (100 ms), 90th: index 91 (910 ms).
	if got, want := SteadyRate(ts), 81/0.81; got < want-0.01 || got > want+0.01 {
		t.Errorf("SteadyRate = %v, want %v", got, want)
	}
	if SteadyRate(ts[:9]) != 0 {
		t.Error("SteadyRate of 9 times is not 0")
	}
	if got := Span(ts[:3]); got != 20*time.Millisecond {
		t.Errorf("Span = %v, want 20ms", got)
	}
}

// PendingMessages reads what the dispatcher would send, and the database
// counters see the rows written in between.
func TestPendingMessagesAndCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := ConnectDB(ctx, pgtest.DB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before, err := ReadDBCounters(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for i, dest := range []string{"a", "a", "b"} {
		if _, err := db.Exec(ctx, `INSERT INTO outbox_messages (destination_id, topic, idempotency_key, org_id, environment, required, payload)
			VALUES ($1, 'order.fulfilled', $2, 'org', 'live', false, '{"n": 1}')`, dest, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := PendingMessages(ctx, db, "a", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0].Key != "k0" || msgs[1].Key != "k1" || string(msgs[0].Payload) != `{"n": 1}` || msgs[0].Topic != "order.fulfilled" {
		t.Errorf("pending messages of a: %+v", msgs)
	}
	after, err := ReadDBCounters(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before); d.Inserted < 3 || d.Transactions < 3 || d.Per(3).Inserted < 1 {
		t.Errorf("counters: %+v after three inserts", d)
	}
}
