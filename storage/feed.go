package storage

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.FeedStore = (*Store)(nil)

// feedChannel is the LISTEN/NOTIFY channel of new order events.
const feedChannel = "order_events"

// FeedRead implements fulfillment.FeedStore. Only events of transactions
// older than every transaction still running are read: a later event can
// then never sort before the cursor (see migration 008). An order event
// stored without its body (migration 040) gets it rendered from its order,
// its topic and its time, as the writer rendered it for its messages.
func (s *Store) FeedRead(ctx context.Context, p fulfillment.FeedParams) ([]fulfillment.OrderEvent, error) {
	var w where
	w.add("(e.xid, e.id) > (" + w.arg(strconv.FormatUint(p.After.XID, 10)) + "::text::xid8, " + w.arg(p.After.ID) + "::bigint)")
	w.add("e.xid < pg_snapshot_xmin(pg_current_snapshot())")
	w.among("e.org_id", p.VisibleOrgs)
	w.eq("e.org_id", p.OrgID)
	w.eq("e.environment", string(p.Environment))
	rows, _ := s.pool.Query(ctx, `
		SELECT e.xid::text, e.id, e.org_id, e.environment, coalesce(e.order_id::text, ''),
			coalesce(e.subscription_id::text, ''), e.topic, e.payload::text, e.created_at,
			o.merchant_order_id, o.total_currency, o.total_minor_units
		FROM order_events e LEFT JOIN orders o ON e.payload IS NULL AND o.id = e.order_id`+w.sql()+
		" ORDER BY e.xid, e.id LIMIT "+w.arg(p.Limit), w.args...)
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.OrderEvent, error) {
		var (
			e                 fulfillment.OrderEvent
			xid               string
			payload, merchant *string
			currency          *string
			minor             *int64
		)
		err := r.Scan(&xid, &e.Cursor.ID, &e.OrgID, &e.Environment, &e.OrderID, &e.SubscriptionID, &e.Topic, &payload,
			&e.CreatedAt, &merchant, &currency, &minor)
		if err != nil {
			return e, err
		}
		if e.Cursor.XID, err = strconv.ParseUint(xid, 10, 64); err != nil {
			return e, err
		}
		switch {
		case payload != nil:
			e.Payload = []byte(*payload)
		case merchant != nil && currency != nil && minor != nil:
			ref := fulfillment.OrderRef{OrderID: e.OrderID, OrgID: e.OrgID, Environment: e.Environment, MerchantOrderID: *merchant}
			total := fulfillment.Money{Currency: *currency, MinorUnits: *minor}
			body, err := fulfillment.OrderEventBody(e.Topic, ref, fulfillment.TopicState(e.Topic), total, e.CreatedAt).Render()
			if err != nil {
				return e, err
			}
			e.Payload = []byte(body)
		default:
			return e, fmt.Errorf("event %d has no body and no order to render it from", e.Cursor.ID)
		}
		return e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading order events: %w", interpret(err))
	}
	return events, nil
}

// FeedTail implements fulfillment.FeedStore.
func (s *Store) FeedTail(ctx context.Context) (fulfillment.FeedCursor, error) {
	var (
		c   fulfillment.FeedCursor
		xid string
	)
	err := s.pool.QueryRow(ctx, `
		SELECT coalesce(max(xid)::text, '0') FROM order_events WHERE xid < pg_snapshot_xmin(pg_current_snapshot())`).Scan(&xid)
	if err != nil {
		return c, fmt.Errorf("reading the feed's tail: %w", interpret(err))
	}
	if c.XID, err = strconv.ParseUint(xid, 10, 64); err != nil {
		return c, fmt.Errorf("reading the feed's tail: %w", err)
	}
	if c.XID == 0 {
		return c, nil
	}
	err = s.pool.QueryRow(ctx, "SELECT max(id) FROM order_events WHERE xid = $1::text::xid8", xid).Scan(&c.ID)
	if err != nil {
		return c, fmt.Errorf("reading the feed's tail: %w", interpret(err))
	}
	return c, nil
}

// FeedListen implements fulfillment.FeedStore.
func (s *Store) FeedListen(ctx context.Context, wake func()) {
	s.feedSignal.listen(ctx, wake)
}
