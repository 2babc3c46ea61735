package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/storage"
)

// BaselineConfig configures RunBaseline.
type BaselineConfig struct {
	DatabaseURL string // a database migrated with storage.Migrate
	Clients     int    // each with its own connection (no shared pool)
	ClosedConfig
}

// RunBaseline measures the PostgreSQL limit of the ingest workload:
// Clients goroutines, each on its own pgx.Conn, insert a realistic inbox
// row (raw_body of a real signed payment.confirmed, ~600 bytes, unique event
// id) with the service's own insert (storage.InboxInsertStatement) in
// autocommit mode, closed loop. Status 200 means
// the row was inserted. synchronous_commit is whatever the server says
// (on, for a durable cluster).
func RunBaseline(ctx context.Context, cfg BaselineConfig) (Result, error) {
	conns := make([]*pgx.Conn, cfg.Clients)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	for i := range conns {
		c, err := pgx.Connect(ctx, cfg.DatabaseURL)
		if err != nil {
			return Result{}, fmt.Errorf("baseline connection %d: %w", i, err)
		}
		conns[i] = c
	}
	var sc string
	if err := conns[0].QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc); err != nil {
		return Result{}, err
	}
	if sc != "on" {
		return Result{}, fmt.Errorf("baseline: synchronous_commit is %q, want on", sc)
	}
	run := yolfi.NewID("")[:8]
	var seq atomic.Int64
	body := baselineBody()
	res := RunClosed(ctx, cfg.ClosedConfig, func(ctx context.Context, w int) (int, error) {
		n := seq.Add(1)
		eid := fmt.Sprintf("evt_base_%s_%d", run, n)
		mid := fmt.Sprintf("base-%s-%d", run, n)
		sql, args := storage.InboxInsertStatement(fulfillment.ProviderEvent{
			Provider: fulfillment.ProviderYolfi, EndpointID: "yolfi-live", OrgID: "org_base", Environment: fulfillment.EnvLive,
			EventID: eid, Type: yolfi.TypePaymentConfirmed, Kind: fulfillment.EventPaymentConfirmed,
			Payment: fulfillment.PaymentInfo{AttemptRef: "inv_" + mid, InvoiceID: "inv_" + mid, PaymentID: "pay_" + mid,
				MerchantOrderID: mid, Amount: fulfillment.TokenAmount(baselineAmount, SettlementToken, SettlementNetwork)},
			Refs: map[string]string{yolfi.RefTxHash: "0xabc"},
		}, body)
		if _, err := conns[w].Exec(ctx, sql, args...); err != nil {
			return 0, err
		}
		return http.StatusOK, nil
	})
	return res, nil
}

// baselineAmount is the amount of the baseline's payment.
var baselineAmount = decimal.RequireFromString("25.000000")

// baselineBody is the raw body the service would store for one of the
// bench's payment.confirmed events (~600 bytes).
func baselineBody() []byte {
	src := YolfiSource{Org: "org_base", Live: true, Secret: []byte("baseline"), BodySize: DefaultBodySize}
	return src.Confirmed("base-" + yolfi.NewID("")).Body
}

// DefaultBodySize is the size of generated webhook bodies, about that of a
// real Yolfi payment.confirmed with its customer and metadata members.
const DefaultBodySize = 600
