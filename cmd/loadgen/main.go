// Command loadgen drives a running fulfillmentd like a payment provider
// would: it creates orders over gRPC, then sends their signed Yolfi
// payment.confirmed webhooks open-loop at a fixed rate, and reports the
// acknowledgement latency and — reading the service's database — the
// ack→fulfilled latency of every event.
//
//	go run ./cmd/loadgen --grpc 127.0.0.1:9090 --token-file T --ingest http://127.0.0.1:8081/webhooks/yolfi-live \
//	    --secret-file S --org org_a --env live --events 2000 --rate 200
//
// Latency is measured from each request's scheduled send time, so a
// generator that falls behind cannot hide delay.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

type options struct {
	grpcAddr, tokenFile, ingestURL, secretFile, org, env, dbURL string
	events, rate, concurrency                                   int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var o options
	flag.StringVar(&o.grpcAddr, "grpc", "127.0.0.1:9090", "gRPC address of fulfillmentd")
	flag.StringVar(&o.tokenFile, "token-file", "", "bearer token with orders:write for --org")
	flag.StringVar(&o.ingestURL, "ingest", "http://127.0.0.1:8081/webhooks/yolfi-test", "webhook endpoint URL")
	flag.StringVar(&o.secretFile, "secret-file", "", "the endpoint's signing secret")
	flag.StringVar(&o.org, "org", "org_demo", "org of the endpoint")
	flag.StringVar(&o.env, "env", "test", "environment of the endpoint: live or test")
	flag.StringVar(&o.dbURL, "database-url", os.Getenv("DATABASE_URL"), "the service's database, to read ack→fulfilled latency (optional)")
	flag.IntVar(&o.events, "events", 1000, "events (and orders) to send")
	flag.IntVar(&o.rate, "rate", 200, "events per second, open loop")
	flag.IntVar(&o.concurrency, "concurrency", 64, "maximum requests in flight")
	flag.Parse()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	token, err := readSecret(o.tokenFile)
	if err != nil {
		return err
	}
	secret, err := readSecret(o.secretFile)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(o.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := fulfillmentv1.NewFulfillmentServiceClient(conn)
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)

	run := yolfi.NewID("lg")[2:10]
	bodies := make([][]byte, o.events)
	ids := make([]string, o.events)
	fmt.Fprintf(os.Stderr, "loadgen: creating %d orders\n", o.events)
	for i := range o.events {
		mid := fmt.Sprintf("lg-%s-%d", run, i)
		_, err := client.CreateOrder(authed, &fulfillmentv1.CreateOrderRequest{
			OrgId: o.org, Environment: o.env, MerchantOrderId: mid,
			Lines: []*fulfillmentv1.OrderLine{{Sku: "load", Kind: "license", Quantity: 1,
				UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 2500}}},
			Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25"},
		})
		if err != nil {
			return fmt.Errorf("creating order: %w", err)
		}
		live := o.env == "live"
		p := yolfi.Payload{ID: yolfi.NewID("evt_"), Type: yolfi.TypePaymentConfirmed, Livemode: &live, OrgID: o.org,
			Data: yolfi.PayloadData{InvoiceID: "inv_" + mid, PaymentID: "pay_" + mid, MerchantOrderID: mid,
				Amount: "25.000000", Token: "USDT", Network: "TRON"}}
		ids[i] = p.ID
		if bodies[i], err = json.Marshal(p); err != nil {
			return err
		}
	}

	fmt.Fprintf(os.Stderr, "loadgen: sending %d events at %d/s\n", o.events, o.rate)
	httpc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.concurrency}}
	acks := make([]time.Duration, o.events)
	statuses := make([]int, o.events)
	sem := make(chan struct{}, o.concurrency)
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(o.rate)
	start := time.Now()
	for i := range o.events {
		scheduled := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(scheduled))
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			req, err := yolfi.NewRequest(ctx, o.ingestURL, []byte(secret), bodies[i], ids[i])
			if err != nil {
				return
			}
			resp, err := httpc.Do(req)
			if err != nil {
				statuses[i] = -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
			acks[i] = time.Since(scheduled)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	ok := 0
	for _, s := range statuses {
		if s == http.StatusOK {
			ok++
		}
	}
	fmt.Printf("sent %d events in %v (%.0f/s offered); %d answered 200\n", o.events, elapsed.Round(time.Millisecond), float64(o.events)/elapsed.Seconds(), ok)
	fmt.Printf("ack latency (from scheduled send): %s\n", percentiles(acks))

	if o.dbURL == "" {
		return nil
	}
	return fulfilledLatency(ctx, o.dbURL, ids)
}

// fulfilledLatency waits until every event is processed and reports
// processed_at − received_at: both stamped with clock_timestamp() by the
// database, in the insert and in the processing transaction.
func fulfilledLatency(ctx context.Context, dbURL string, ids []string) error {
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.Close(ctx)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var pending int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM inbox_events WHERE event_id = ANY($1) AND state = 'pending'`, ids).Scan(&pending); err != nil {
			return err
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("events still pending after 2 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	rows, err := db.Query(ctx, `
		SELECT extract(epoch FROM processed_at - received_at), coalesce(decision, '')
		FROM inbox_events WHERE event_id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	var lat []time.Duration
	decisions := map[string]int{}
	for rows.Next() {
		var secs float64
		var d string
		if err := rows.Scan(&secs, &d); err != nil {
			return err
		}
		lat = append(lat, time.Duration(secs*float64(time.Second)))
		decisions[d]++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	fmt.Printf("ack→fulfilled latency (database clock): %s\n", percentiles(lat))
	fmt.Printf("decisions: %v\n", decisions)
	return nil
}

func percentiles(ds []time.Duration) string {
	var xs []time.Duration
	for _, d := range ds {
		if d > 0 {
			xs = append(xs, d)
		}
	}
	if len(xs) == 0 {
		return "no samples"
	}
	slices.Sort(xs)
	p := func(q float64) time.Duration { return xs[min(len(xs)-1, int(q*float64(len(xs))))] }
	return fmt.Sprintf("n=%d p50=%v p90=%v p99=%v max=%v", len(xs),
		p(0.50).Round(10*time.Microsecond), p(0.90).Round(10*time.Microsecond),
		p(0.99).Round(10*time.Microsecond), xs[len(xs)-1].Round(10*time.Microsecond))
}

func readSecret(path string) (string, error) {
	if path == "" {
		return "", errors.New("--token-file and --secret-file are required")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
