package storage

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.ReconStore = (*Store)(nil)

// reconColumns are what is read of an item (scanReconItem), from
// reconciliation_items r LEFT JOIN inbox_events e ON e.id = r.inbox_event_id.
const reconColumns = `r.id, r.kind, r.state, r.org_id, r.environment, r.order_id, coalesce(e.event_id, ''),
	coalesce(r.provider, ''), coalesce(r.attempt_ref, ''), coalesce(r.payment_id, ''),
	r.amount::text, r.expected_amount::text, r.token, r.network, r.currency,
	r.detail, r.created_at, r.resolved_at, coalesce(r.resolved_by, ''), coalesce(r.resolution_note, ''),
	coalesce(r.outbox_message_id, 0), coalesce(r.resolution, ''), coalesce(r.resolved_by_detail, ''),
	coalesce(r.inbox_event_id, 0), coalesce(r.payment_start_id, 0), r.subscription_id`

const reconFrom = ` FROM reconciliation_items r LEFT JOIN inbox_events e ON e.id = r.inbox_event_id`

func scanReconItem(r pgx.Row) (fulfillment.ReconItem, error) {
	var (
		it                                         fulfillment.ReconItem
		orderID, subID                             *uuid.UUID
		amount, expected, token, network, currency *string
	)
	err := r.Scan(&it.ID, &it.Kind, &it.State, &it.OrgID, &it.Environment, &orderID, &it.EventID,
		&it.Provider, &it.AttemptRef, &it.PaymentID, &amount, &expected, &token, &network, &currency,
		&it.Detail, &it.CreatedAt, &it.ResolvedAt, &it.ResolvedBy, &it.ResolutionNote, &it.MessageID,
		&it.Resolution, &it.ResolvedByDetail, &it.InboxID, &it.PaymentStartID, &subID)
	if err != nil {
		return it, err
	}
	if orderID != nil {
		it.OrderID = orderID.String()
	}
	if subID != nil {
		it.SubscriptionID = subID.String()
	}
	if it.Amount, err = amountOf(amount, token, network, currency); err != nil {
		return it, err
	}
	it.Expected, err = amountOf(expected, token, network, currency)
	return it, err
}

// reconWhere adds f's conditions to w.
func reconWhere(w *where, f fulfillment.ReconFilter) {
	w.among("r.org_id", f.VisibleOrgs)
	w.eq("r.org_id", f.OrgID)
	w.eq("r.environment", string(f.Environment))
	w.eq("r.kind", string(f.Kind))
	w.eq("r.state", string(f.State))
	w.uuidEq("r.order_id", f.OrderID)
	if !f.CreatedFrom.IsZero() {
		w.add("r.created_at >= " + w.arg(f.CreatedFrom))
	}
	if !f.CreatedBefore.IsZero() {
		w.add("r.created_at < " + w.arg(f.CreatedBefore))
	}
}

// ReconList implements fulfillment.ReconStore.
func (s *Store) ReconList(ctx context.Context, p fulfillment.ReconListParams) ([]fulfillment.ReconItem, error) {
	var w where
	reconWhere(&w, p.Filter)
	w.below("r.id", p.BeforeID)
	query := "SELECT " + reconColumns + reconFrom + w.sql() + " ORDER BY r.id DESC LIMIT " + w.arg(p.Limit)
	rows, _ := s.pool.Query(ctx, query, w.args...)
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.ReconItem, error) { return scanReconItem(r) })
	if err != nil {
		return nil, fmt.Errorf("listing reconciliation items: %w", interpret(err))
	}
	return items, nil
}

// item is a reconciliation item to open: its kind, what it is about, the
// payment's amount and what the order expected (when known), and why, in
// words. Its key is fulfillment.ItemKey of its kind and subject, which
// reads what names the situation for that kind: opening it again, from a
// redelivery, a replay or a race, opens nothing.
type item struct {
	kind     fulfillment.ReconKind
	subject  fulfillment.ItemSubject
	amount   fulfillment.Amount
	expected *string
	detail   string
}

// queueItem queues the statement that opens it.
func queueItem(b *pgx.Batch, it item) { queueItems(b, []item{it}) }

// queueItems queues the statement that opens items, none when there are
// none: the one builder of reconciliation items, whoever opens them.
func queueItems(b *pgx.Batch, items []item) {
	if len(items) == 0 {
		return
	}
	var (
		kind, org, env, detail, key               []string
		order, sub, provider, attempt, payment    nulls[string]
		value, expected, token, network, currency nulls[string]
		inbox, start, message                     nulls[int64]
	)
	for _, it := range items {
		s := it.subject
		v, t, n, c := amountColumns(it.amount)
		kind, org, env = append(kind, string(it.kind)), append(org, s.OrgID), append(env, string(s.Environment))
		order, sub = append(order, opt(s.OrderID)), append(sub, opt(s.SubscriptionID))
		inbox, start, message = append(inbox, optID(s.InboxID)), append(start, optID(s.StartID)), append(message, optID(s.MessageID))
		provider, attempt, payment = append(provider, opt(string(s.Provider))), append(attempt, opt(s.AttemptRef)), append(payment, opt(s.PaymentID))
		value, expected, token, network, currency = append(value, v), append(expected, it.expected), append(token, t), append(network, n), append(currency, c)
		detail, key = append(detail, it.detail), append(key, fulfillment.ItemKey(it.kind, s))
	}
	b.Queue(`
		INSERT INTO reconciliation_items (kind, org_id, environment, order_id, subscription_id, inbox_event_id,
			payment_start_id, outbox_message_id, provider, attempt_ref, payment_id,
			amount, expected_amount, token, network, currency, detail, dedupe_key)
		SELECT kind, org_id, environment, order_id, subscription_id, inbox_event_id,
			payment_start_id, outbox_message_id, provider, attempt_ref, payment_id,
			amount::numeric, expected_amount::numeric, token, network, currency, detail, dedupe_key
		FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::uuid[], $6::bigint[], $7::bigint[], $8::bigint[],
			$9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[],
			$17::text[], $18::text[]) WITH ORDINALITY
			AS i (kind, org_id, environment, order_id, subscription_id, inbox_event_id,
				payment_start_id, outbox_message_id, provider, attempt_ref, payment_id,
				amount, expected_amount, token, network, currency, detail, dedupe_key, n)
		ORDER BY n
		ON CONFLICT ON CONSTRAINT reconciliation_items_dedupe_key DO NOTHING`,
		kind, org, env, order, sub, inbox, start, message, provider, attempt, payment,
		value, expected, token, network, currency, detail, key)
}

// openItems opens items in tx, in one statement (queueItems), and returns
// how many it opened: an item opened before is not opened again.
func openItems(ctx context.Context, tx pgx.Tx, items []item) (int, error) {
	if len(items) == 0 {
		return 0, nil
	}
	b := &pgx.Batch{}
	queueItems(b, items)
	br := tx.SendBatch(ctx, b)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("opening reconciliation items: %w", interpret(err))
	}
	return int(tag.RowsAffected()), nil
}

// failRows runs fail, a statement that fails the rows of failed (their ids
// are $1) and returns, for each, its id and then the columns the item of a
// failed row reads, scanned into into (id among them); it then opens, in
// tx, the item that build makes of each failed row, in the order of failed.
func failRows(ctx context.Context, tx pgx.Tx, fail string, failed []failedRow,
	id *int64, into []any, build func(r failedRow) item) error {
	ids := make([]int64, len(failed))
	byID := make(map[int64]failedRow, len(failed))
	for i, r := range failed {
		ids[i], byID[r.id] = r.id, r
	}
	built := make(map[int64]item, len(failed))
	rows, _ := tx.Query(ctx, fail, ids)
	if _, err := pgx.ForEachRow(rows, into, func() error {
		built[*id] = build(byID[*id])
		return nil
	}); err != nil {
		return fmt.Errorf("failing rows: %w", interpret(err))
	}
	items := make([]item, 0, len(built))
	for _, id := range ids {
		if it, ok := built[id]; ok {
			items = append(items, it)
		}
	}
	_, err := openItems(ctx, tx, items)
	return err
}

// optID is id, or NULL for 0 (none).
func optID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}

// answeredItems are open items that what a batch just did answers: a
// replayed event decided, a retried message delivered. queue resolves them
// as retried by the service, each with its note. An item is found by its
// kind and the stored event or the message it is about, or by its key
// (0 and "": none).
type answeredItems struct {
	kinds, keys, notes []string
	events, messages   []int64
}

// add records that note answers the open items of kind about stored event
// event or message message, or under key.
func (a *answeredItems) add(kind fulfillment.ReconKind, event, message int64, key, note string) {
	a.kinds, a.keys, a.notes = append(a.kinds, string(kind)), append(a.keys, key), append(a.notes, note)
	a.events, a.messages = append(a.events, event), append(a.messages, message)
}

// queue adds to b the statement that resolves the items a answers (none
// when a is empty: an event decided, or a message delivered, in its first
// round costs nothing). Each way of finding an item is a probe of its own
// index: the open items by stored event, the open items by message
// (migration 055), the items by key.
func (a *answeredItems) queue(b *pgx.Batch) {
	if len(a.kinds) == 0 {
		return
	}
	b.Queue(`
		WITH a AS MATERIALIZED (
			SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[])
				AS a (kind, event, message, key, note)
		), answered AS (
			-- Each read probes its index for the batch's values (= ANY),
			-- whatever the statistics say of the open items.
			SELECT i.id, a.note FROM reconciliation_items i JOIN a ON a.event = i.inbox_event_id AND a.kind = i.kind
			WHERE i.inbox_event_id = ANY($2::bigint[]) AND i.state = 'open'
			UNION ALL
			SELECT i.id, a.note FROM reconciliation_items i JOIN a ON a.message = i.outbox_message_id AND a.kind = i.kind
			WHERE i.outbox_message_id = ANY($3::bigint[]) AND i.state = 'open'
			UNION ALL
			SELECT i.id, a.note FROM reconciliation_items i JOIN a ON a.key = i.dedupe_key AND a.kind = i.kind
			WHERE i.dedupe_key = ANY($4::text[]) AND i.kind = ANY($1::text[]) AND i.state = 'open'
		)
		UPDATE reconciliation_items r SET state = 'resolved', resolution = '`+string(fulfillment.ResolutionRetried)+`',
			resolved_at = clock_timestamp(), resolved_by = '`+LateMatchActor+`', resolution_note = answered.note
		FROM answered
		WHERE r.id = answered.id AND r.state = 'open'`,
		a.kinds, a.events, a.messages, a.keys, a.notes)
}
