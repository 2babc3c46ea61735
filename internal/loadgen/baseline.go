package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// BaselineInsert is the raw PostgreSQL work of accepting one webhook: the
// service's own inbox insert (same columns, same conflict target), run as
// one autocommit statement, i.e. one commit per row.
const BaselineInsert = `
	INSERT INTO inbox_events (provider, endpoint_id, org_id, environment, event_id, event_type, kind,
		test_mode, occurred_at, attempt_ref, payment_id, invoice_id, checkout_session_id,
		merchant_order_id, paylink_id, subscription_id, amount, token, network, tx_hash, raw_body,
		state, decision, decision_reason, processed_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, ''), nullif($11, ''), nullif($12, ''),
		nullif($13, ''), nullif($14, ''), nullif($15, ''), nullif($16, ''), $17::numeric,
		nullif($18, ''), nullif($19, ''), nullif($20, ''), $21, $22, $23, $24,
		CASE WHEN $22 = 'pending' THEN NULL ELSE clock_timestamp() END)
	ON CONFLICT ON CONSTRAINT inbox_events_event_key DO NOTHING
	RETURNING id, state`

// BaselineConfig configures RunBaseline.
type BaselineConfig struct {
	DatabaseURL string // a database migrated with storage.Migrate
	Clients     int    // each with its own connection (no shared pool)
	ClosedConfig
}

// RunBaseline measures the PostgreSQL limit of the ingest workload:
// Clients goroutines, each on its own pgx.Conn, insert a realistic inbox
// row (raw_body of a real signed payment.confirmed, ~600 bytes, unique event
// id) with BaselineInsert in autocommit mode, closed loop. Status 200 means
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
		var id int64
		var state string
		err := conns[w].QueryRow(ctx, BaselineInsert,
			"yolfi", "yolfi-live", "org_base", "live", eid, yolfi.TypePaymentConfirmed, "payment_confirmed",
			false, nil, "inv_"+mid, "pay_"+mid, "inv_"+mid, "", mid, "", "", "25.000000",
			SettlementToken, SettlementNetwork, "0xabc", body, "pending", nil, nil,
		).Scan(&id, &state)
		if err != nil {
			return 0, err
		}
		return http.StatusOK, nil
	})
	return res, nil
}

// baselineBody is the raw body the service would store for one of the
// bench's payment.confirmed events (~600 bytes).
func baselineBody() []byte {
	src := EventSource{Org: "org_base", Live: true, Secret: []byte("baseline"), BodySize: DefaultBodySize}
	return src.Confirmed("base-" + yolfi.NewID("")).Body
}

// DefaultBodySize is the size of generated webhook bodies, about that of a
// real Yolfi payment.confirmed with its customer and metadata members.
const DefaultBodySize = 600
