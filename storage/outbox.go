package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.OutboxWork = (*Store)(nil)

// outboxChannel is the LISTEN/NOTIFY channel of new outbox messages.
const outboxChannel = "outbox_messages"

// outboxTable is the outbox as a leased table (OutboxQueue), one partition per
// destination: a destination's dispatcher claims its own messages, and none
// while the destination is disabled. Its queue is outbox_work, a narrow row
// per queued message (outbox_messages keeps the messages themselves, written
// when queued and when their outcome is recorded; a trigger queues every
// message inserted pending). Recording a delivered or uncertain message
// deletes its row (OutboxRecord); a message failed past its attempts is
// failed on outbox_messages too, with the attempts and the last error, and
// opens a failed_delivery item. Its work row stays, failed, until the
// message is retried.
var outboxTable = newLeasedTable(leasedTable{
	table:     "outbox_work",
	noun:      "message",
	partition: "destination_id",
	claimGate: `NOT EXISTS (SELECT 1 FROM outbox_destinations d WHERE d.id = $6 AND d.disabled_at IS NOT NULL)`,
	// A message marked as being sent (OutboxSending) may have been
	// delivered: its worker died with the request possibly on the wire.
	// Failed, a person would send it again; claimed, the dispatcher records
	// it uncertain, without sending it, and opens its item.
	unfailable: `sending_since IS NOT NULL`,
	failed: func(ctx context.Context, tx pgx.Tx, failed []failedRow, maxAttempts int) error {
		var (
			m           fulfillment.ItemSubject
			destination string
			attempts    int
		)
		return failRows(ctx, tx, `
			UPDATE outbox_messages m SET `+outboxFailedSet+`, attempts = w.attempts, last_error = w.last_error
			FROM outbox_work w WHERE w.id = ANY($1) AND m.id = w.id
			RETURNING m.id, m.org_id, m.environment, coalesce(m.order_id::text, ''), m.destination_id, m.attempts, m.retries`, failed,
			&m.MessageID, []any{&m.MessageID, &m.OrgID, &m.Environment, &m.OrderID, &destination, &attempts, &m.Round}, func(r failedRow) item {
				detail := fmt.Sprintf("delivery to %s failed %d times; last error: %s", destination, maxAttempts, r.cause)
				if r.abandoned {
					detail = fmt.Sprintf("delivery to %s did not complete in %d attempts (the worker stopped during each)", destination, attempts)
				}
				return item{kind: fulfillment.ReconFailedDelivery, subject: m, detail: detail}
			})
	},
})

// outboxFailedSet assigns the columns of a message that its queue failed.
const outboxFailedSet = `state = 'failed', processed_at = clock_timestamp()`

// outboxRequeue is the CTEs that put back in the queue the messages that
// the query ids returns (one column) and whose state the SQL condition
// retryable allows, noting why on each with the text expression note (of
// the message's row before, m): what a retry and a re-drive do. "work"
// locks the messages' work rows first (by their ids alone, an init plan:
// see lockSubscriptions), so that a retry racing a claim or a record sees its
// outcome; a message leased at that moment is left alone.
// "done" ends the chain with the ids put back. attempts start again from
// 0 and a new round begins (retries counts it: its failure is a
// situation of its own), except for a message still pending (a retry only
// moves it forward), which also keeps its sending mark: its request may
// have been on the wire when its worker stopped, and its next claim then
// records it uncertain rather than sending it again. A failed or uncertain message retried by a
// person is sent.
func outboxRequeue(ids, retryable, note string) string {
	return `
		work AS (
			SELECT id, lease_owner FROM outbox_work WHERE id = ANY (ARRAY(` + ids + `)) ORDER BY id FOR UPDATE
		), requeued AS (
			UPDATE outbox_messages m SET
				attempts = CASE WHEN m.state = 'pending' THEN m.attempts ELSE 0 END,
				retries = m.retries + CASE WHEN m.state = 'pending' THEN 0 ELSE 1 END,
				processed_at = NULL, state = 'pending',
				last_error = CASE WHEN m.state = 'pending' THEN m.last_error ELSE ` + note + ` END
			WHERE m.id IN (` + ids + `) AND (` + retryable + `)
				AND NOT EXISTS (SELECT 1 FROM work w WHERE w.id = m.id AND w.lease_owner IS NOT NULL)
			RETURNING m.id, m.destination_id, m.attempts, m.last_error
		), done AS (
			INSERT INTO outbox_work AS w (id, destination_id, attempts, last_error)
			SELECT id, destination_id, attempts, last_error FROM requeued
			ON CONFLICT (id) DO UPDATE SET state = 'pending', next_attempt_at = clock_timestamp(),
				attempts = CASE WHEN w.state = 'pending' THEN w.attempts ELSE EXCLUDED.attempts END,
				last_error = CASE WHEN w.state = 'pending' THEN w.last_error ELSE EXCLUDED.last_error END,
				lease_owner = NULL, lease_until = NULL, processed_at = NULL,
				-- A pending message keeps its mark: hurried by a retry, it is
				-- still one whose request may have been on the wire.
				sending_since = CASE WHEN w.state = 'pending' THEN w.sending_since END
			-- A row leased meanwhile is left alone: "work" could not see it
			-- (another retry put the message back, and a dispatcher claimed
			-- it, after this statement began), and its lease is a send
			-- under way, which another claim would make a second one.
			WHERE w.lease_owner IS NULL
			RETURNING w.id
		)`
}

// queueLineRequests queues the fulfillment.requested messages rows hold.
func queueLineRequests(b *pgx.Batch, rows []lineRequest) {
	var (
		orders, dests, keys, orgs, envs, bodies []string
		lines                                   []int
	)
	for _, r := range rows {
		orders, lines, dests = append(orders, r.order), append(lines, r.line), append(dests, r.destination)
		keys = append(keys, fulfillment.LineKey(r.order, r.line))
		orgs, envs, bodies = append(orgs, r.org), append(envs, string(r.env)), append(bodies, r.body)
	}
	b.Queue(`
		INSERT INTO outbox_messages (destination_id, topic, idempotency_key, org_id, environment, order_id, line_no,
			required, payload)
		SELECT destination, $1::text, key, org_id, environment, order_id, line_no, true, payload::jsonb
		FROM unnest($2::uuid[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) WITH ORDINALITY
			AS r (order_id, line_no, destination, key, org_id, environment, payload, n)
		ORDER BY n
		ON CONFLICT ON CONSTRAINT outbox_messages_key DO NOTHING`,
		fulfillment.TopicFulfillmentRequested, orders, lines, dests, keys, orgs, envs, bodies)
}

// queuePublishes records the events rows publish, in order, at at, and
// queues a message announcing each to every destination subscribed to its
// topic, with its body. An event whose body the feed renders again
// (publishRow.derived) is stored without it. An order publishes each topic
// once, a subscription each topic once per period (a repeat of which
// inserts nothing: its first row of the batch is the one kept).
//
// The conflict clause is sent only with a subscription's event: with it,
// PostgreSQL inserts every row of the statement speculatively, which costs
// each a second WAL record (its confirmation), and an order's event needs
// no clause (below).
func (s *Store) queuePublishes(b *pgx.Batch, rows []publishRow, at time.Time) queued {
	var (
		orders, subs       nulls[string]
		periods            nulls[int]
		topics, orgs, envs []string
		bodies             []string
		kept               []bool
		onConflict         string
	)
	for _, r := range rows {
		orders, subs, periods = append(orders, opt(r.order)), append(subs, opt(r.subscription)), append(periods, r.period)
		topics, orgs, envs, bodies = append(topics, string(r.topic)), append(orgs, r.org), append(envs, string(r.env)), append(bodies, r.body)
		kept = append(kept, !r.derived)
		if r.subscription != "" {
			onConflict = periodOnce
		}
	}
	dTopics, dIDs := s.subscribers(topics)
	b.Queue(`
		WITH p AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::uuid[], $5::int[], $6::text[], $7::text[], $8::bool[])
				WITH ORDINALITY AS p (org_id, environment, order_id, subscription_id, period, topic, payload, kept, n)
		), event AS (
			INSERT INTO order_events (org_id, environment, order_id, subscription_id, period, topic, payload, created_at)
			SELECT org_id, environment, order_id, subscription_id, period, topic,
				CASE WHEN kept THEN payload::jsonb END, $9::timestamptz
			FROM p
			ORDER BY n
			-- A subscription publishes a topic once per period: a repeat
			-- inserts nothing. An order enters each announced state once
			-- (the rules never enter fulfilled, refunded or on_hold twice),
			-- so its events take no conflict check: order_events_order_once
			-- makes a repeat an error, never a second event.
			`+onConflict+`
			RETURNING id, org_id, environment, order_id, subscription_id, period, topic
		)
		INSERT INTO outbox_messages (destination_id, topic, idempotency_key, org_id, environment, order_id,
			subscription_id, required, payload)
		SELECT d.id, e.topic,
			CASE WHEN e.order_id IS NOT NULL THEN format($10::text, e.order_id, e.topic)
				ELSE format($11::text, e.subscription_id, e.topic, e.period) END,
			e.org_id, e.environment, e.order_id, e.subscription_id, false, p.payload::jsonb
		FROM event e
			JOIN p ON p.topic = e.topic
				AND (p.order_id = e.order_id OR (p.subscription_id = e.subscription_id AND p.period = e.period))
			JOIN unnest($12::text[], $13::text[]) AS d (topic, id) ON d.topic = e.topic
		ORDER BY e.id, d.id, p.n
		ON CONFLICT ON CONSTRAINT outbox_messages_key DO NOTHING`,
		orgs, envs, orders, subs, periods, topics, bodies, kept, at,
		fulfillment.EventKeyFormat, fulfillment.SubscriptionEventKeyFormat, dTopics, dIDs)
	return queued{messages: len(dIDs) > 0, events: true}
}

// periodOnce makes a subscription's repeated event of a period insert
// nothing (queuePublishes).
const periodOnce = "ON CONFLICT (subscription_id, topic, period) WHERE subscription_id IS NOT NULL DO NOTHING"

// subscribers are the destinations subscribed to each of topics, as
// pairs: (topic, destination id).
func (s *Store) subscribers(topics []string) (pairTopics, ids []string) {
	seen := map[string]bool{}
	for _, t := range topics {
		if seen[t] {
			continue
		}
		seen[t] = true
		for _, d := range s.subscriptions[fulfillment.Topic(t)] {
			pairTopics, ids = append(pairTopics, t), append(ids, d)
		}
	}
	return pairTopics, ids
}

// queueWithdrawals queues the order.refunded events rows hold (recorded in
// this batch, before) for each destination of their orders' external
// lines, subscribed or not, unless they have them already.
func queueWithdrawals(b *pgx.Batch, rows []publishRow) queued {
	var orders, orgs, envs, bodies []string
	for _, r := range rows {
		orders, orgs, envs, bodies = append(orders, r.order), append(orgs, r.org), append(envs, string(r.env)), append(bodies, r.body)
	}
	b.Queue(`
		INSERT INTO outbox_messages (destination_id, topic, idempotency_key, org_id, environment, order_id,
			required, payload)
		SELECT DISTINCT ON (l.destination, r.order_id) l.destination, $2, format($3::text, r.order_id, $2::text),
			r.org_id, r.environment, r.order_id, false, r.payload::jsonb
		FROM unnest($1::uuid[], $4::text[], $5::text[], $6::text[]) AS r (order_id, org_id, environment, payload)
			JOIN order_lines l ON l.order_id = r.order_id
		WHERE l.kind = 'external' AND l.destination IS NOT NULL
		ORDER BY l.destination, r.order_id
		ON CONFLICT ON CONSTRAINT outbox_messages_key DO NOTHING`,
		orders, fulfillment.TopicOrderRefunded, fulfillment.EventKeyFormat, orgs, envs, bodies)
	return queued{messages: true}
}

// OutboxLoad implements fulfillment.OutboxWork.
func (s *Store) OutboxLoad(ctx context.Context, ids []int64, owner string) ([]fulfillment.OutboxMessage, error) {
	rows, _ := s.pool.Query(ctx, `
		SELECT m.id, m.destination_id, m.topic, m.idempotency_key, m.payload::text, w.sending_since IS NOT NULL, m.created_at
		FROM outbox_work w JOIN outbox_messages m ON m.id = w.id
		WHERE w.id = ANY($1) AND w.lease_owner = $2
		ORDER BY m.id`, ids, owner)
	var msgs []fulfillment.OutboxMessage
	err := forEachRow(rows, func(r pgx.Rows) error {
		var (
			m       fulfillment.OutboxMessage
			payload string
		)
		if err := r.Scan(&m.ID, &m.DestinationID, &m.Topic, &m.Key, &payload, &m.Interrupted, &m.CreatedAt); err != nil {
			return err
		}
		m.Payload = []byte(payload)
		msgs = append(msgs, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading outbox messages: %w", interpret(err))
	}
	return msgs, nil
}

// OutboxSending implements fulfillment.OutboxWork. It commits before the
// request starts, synchronously: after a crash, the mark must be there.
func (s *Store) OutboxSending(ctx context.Context, id int64, owner string) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE outbox_work SET sending_since = clock_timestamp()
		WHERE `+leaseHeld("ARRAY[$1::bigint]", "$2"), id, owner)
	if err != nil {
		return fmt.Errorf("marking outbox message as sending: %w", interpret(err))
	}
	if tag.RowsAffected() == 0 {
		return outboxTable.lost(id)
	}
	return nil
}

// OutboxDisabled implements fulfillment.OutboxWork.
func (s *Store) OutboxDisabled(ctx context.Context, destination string) (bool, error) {
	var disabled bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_destinations WHERE id = $1 AND disabled_at IS NOT NULL)`,
		destination).Scan(&disabled)
	if err != nil {
		return false, fmt.Errorf("reading destination %s: %w", destination, interpret(err))
	}
	return disabled, nil
}

// OutboxRecord implements fulfillment.OutboxWork. Its statements, in one
// transaction: the messages' work rows locked (in id order), which checks
// the leases; their attempts inserted, and the delivered ones taken off the
// queue and marked, one statement each; what the other outcomes change, per
// message (they are rare); then the orders whose last awaited message was
// delivered completed together (completeOrders).
func (s *Store) OutboxRecord(ctx context.Context, owner string, attempts []fulfillment.MessageAttempt) ([]int64, error) {
	var (
		q    queued
		lost []int64
	)
	ids := make([]int64, len(attempts))
	for i, a := range attempts {
		ids[i] = a.ID
	}
	type held struct {
		attempt            int
		destination, topic string
		orderID            *string
		required           bool
		org                string
		environment        fulfillment.Environment
		retries            int
	}
	var byID map[int64]held
	// The work rows first, then (for deliveries) their orders: the order
	// InboxProcess never takes, as it writes messages of locked orders only
	// by inserting them. The lock reads the work rows alone, by id (see
	// lockSubscriptions); their messages are joined after it. A message
	// whose work row is leased changes only through its lease holder. It
	// goes with the BEGIN (pipelinedTx), and the COMMIT with the last
	// statements when no order is completed: two round trips fewer. The
	// transaction's statements run on generic plans (planSettings), made
	// once per connection: they take arrays, and PostgreSQL planned them
	// for their parameters at the first five records of each connection,
	// and at every record where a custom plan looked cheaper. In the
	// bench's drain of 12,000 messages their planning took 26.6 and 31.9 µs
	// per delivery, 10.1 and 13.5 µs on generic plans (two runs each).
	first := func(b *pgx.Batch) {
		byID = map[int64]held{}
		b.Queue(`
			WITH w AS MATERIALIZED (
				SELECT id, attempts FROM outbox_work WHERE id = ANY($1) AND lease_owner = $2 ORDER BY id FOR UPDATE
			)
			SELECT w.id, w.attempts, m.destination_id, m.topic, m.order_id::text, m.required, m.org_id, m.environment, m.retries
			FROM w JOIN outbox_messages m ON m.id = w.id
			ORDER BY w.id`, ids, owner).Query(func(rows pgx.Rows) error {
			err := forEachRow(rows, func(r pgx.Rows) error {
				var (
					id int64
					h  held
				)
				if err := r.Scan(&id, &h.attempt, &h.destination, &h.topic, &h.orderID, &h.required, &h.org, &h.environment, &h.retries); err != nil {
					return err
				}
				byID[id] = h
				return nil
			})
			if err != nil {
				return fmt.Errorf("locking outbox messages: %w", interpret(err))
			}
			return nil
		})
	}
	err := s.withPipelinedTx(ctx, planSettings, first, func(tx *pipelinedTx) error {
		lost = lost[:0]
		var (
			aID, aAttempt     []int64
			aStarted          []time.Time
			aStatus           nulls[int]
			aOutcome, aReason []string
			delivered         []int64
			deliveredStatus   []int
			answered          answeredItems
			orders            []string
			seenOrder         = map[string]bool{}
		)
		b := &pgx.Batch{}
		for _, a := range attempts {
			h, ok := byID[a.ID]
			if !ok {
				lost = append(lost, a.ID)
				continue
			}
			aID, aAttempt, aStarted = append(aID, a.ID), append(aAttempt, int64(h.attempt)), append(aStarted, a.StartedAt)
			aStatus, aOutcome, aReason = append(aStatus, optInt(a.Status)), append(aOutcome, string(a.Outcome)), append(aReason, a.Reason)
			id := a.ID
			switch a.Outcome {
			case fulfillment.OutcomeDelivered:
				delivered, deliveredStatus = append(delivered, id), append(deliveredStatus, a.Status)
				if h.retries > 0 {
					// A round after a person's retry: the items of the
					// rounds before are answered.
					note := fmt.Sprintf("the message was retried and delivered to %s (HTTP %d)", h.destination, a.Status)
					answered.add(fulfillment.ReconFailedDelivery, 0, id, "", note)
					answered.add(fulfillment.ReconUncertainDelivery, 0, id, "", note)
				}
				if h.required && h.orderID != nil && !seenOrder[*h.orderID] {
					seenOrder[*h.orderID] = true
					orders = append(orders, *h.orderID)
				}
			case fulfillment.OutcomeUncertain, fulfillment.OutcomeInterrupted:
				b.Queue(`
					WITH work AS (DELETE FROM outbox_work WHERE id = $1 RETURNING id, attempts)
					UPDATE outbox_messages m SET state = 'uncertain', processed_at = clock_timestamp(),
						attempts = w.attempts, last_status = $2, last_error = $3
					FROM work w WHERE m.id = w.id`, id, optInt(a.Status), a.Reason)
				queueItem(b, item{kind: fulfillment.ReconUncertainDelivery,
					subject: fulfillment.ItemSubject{OrgID: h.org, Environment: h.environment, OrderID: str(h.orderID), MessageID: id,
						Round: h.retries},
					detail: fmt.Sprintf("%s may or may not have received this %s message (%s), and it does not honour idempotency keys: "+
						"check with it, then retry the message if it does not have it, or confirm it delivered if it does",
						h.destination, h.topic, a.Reason)})
			case fulfillment.OutcomeGone:
				b.Queue(`
					INSERT INTO outbox_destinations AS d (id, disabled_at, disabled_reason)
					VALUES ($1, now(), $2)
					ON CONFLICT (id) DO UPDATE SET disabled_at = coalesce(d.disabled_at, now()),
						disabled_reason = coalesce(d.disabled_reason, EXCLUDED.disabled_reason), updated_at = now()`,
					h.destination, fmt.Sprintf("answered %s to message %d", a.Reason, id))
				b.Queue(`
					UPDATE outbox_work SET lease_owner = NULL, lease_until = NULL, sending_since = NULL,
						next_attempt_at = clock_timestamp(), attempts = greatest(attempts - 1, 0), last_error = $2
					WHERE id = $1`, id, "destination disabled: "+a.Reason)
				b.Queue(`UPDATE outbox_messages SET last_status = $2 WHERE id = $1`, id, a.Status)
			case fulfillment.OutcomeRetry:
				b.Queue(`UPDATE outbox_work SET sending_since = NULL WHERE id = $1`, id)
				b.Queue(`UPDATE outbox_messages SET last_status = $2 WHERE id = $1`, id, optInt(a.Status))
			default:
				return fmt.Errorf("recording delivery outcome %q: unknown", a.Outcome)
			}
		}
		if len(aID) == 0 {
			return nil
		}
		b.Queue(`
			INSERT INTO outbox_attempts (message_id, attempt, started_at, status, outcome, reason)
			SELECT * FROM unnest($1::bigint[], $2::int[], $3::timestamptz[], $4::int[], $5::text[], $6::text[])`,
			aID, aAttempt, aStarted, aStatus, aOutcome, aReason)
		if len(delivered) > 0 {
			b.Queue(`
				WITH work AS (DELETE FROM outbox_work WHERE id = ANY($1) RETURNING id, attempts)
				UPDATE outbox_messages m SET state = 'delivered', processed_at = clock_timestamp(),
					attempts = w.attempts, last_status = d.status, last_error = NULL
				FROM work w JOIN unnest($1::bigint[], $2::int[]) AS d (id, status) ON d.id = w.id
				WHERE m.id = w.id`, delivered, deliveredStatus)
		}
		answered.queue(b)
		if len(orders) == 0 {
			// The COMMIT goes with them.
			if err := tx.commitWith(ctx, b); err != nil {
				return fmt.Errorf("recording delivery attempts: %w", interpret(err))
			}
			return nil
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("recording delivery attempts: %w", interpret(err))
		}
		var err error
		q, err = s.completeOrders(ctx, tx, orders)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.wake(q)
	return lost, nil
}

// completeOrders applies fulfillment.DecideDelivered to each of the orders
// after some of their required messages were delivered, holding the
// orders' row locks (taken in id order). It reports what it queued.
func (s *Store) completeOrders(ctx context.Context, tx querier, orderIDs []string) (queued, error) {
	type locked struct {
		ref     fulfillment.OrderRef
		version pgtype.TID
		state   fulfillment.State
		total   fulfillment.Money
	}
	// The locks first, then the counts in a statement of their own: under
	// READ COMMITTED it sees what concurrent deliveries to these orders
	// committed while this one waited for the locks.
	rows, _ := tx.Query(ctx, `
		SELECT id::text, ctid, state, org_id, environment, merchant_order_id, total_currency, total_minor_units
		FROM orders WHERE id = ANY($1::uuid[])
		ORDER BY id
		FOR UPDATE`, orderIDs)
	var orders []locked
	err := forEachRow(rows, func(r pgx.Rows) error {
		var o locked
		if err := r.Scan(&o.ref.OrderID, &o.version, &o.state, &o.ref.OrgID, &o.ref.Environment, &o.ref.MerchantOrderID,
			&o.total.Currency, &o.total.MinorUnits); err != nil {
			return err
		}
		orders = append(orders, o)
		return nil
	})
	if err != nil {
		return queued{}, fmt.Errorf("locking orders: %w", interpret(err))
	}
	// An external line awaits delivery until a message for it is
	// delivered; lines that name no destination never are.
	undelivered := map[string]int{}
	rows, _ = tx.Query(ctx, `
		SELECT l.order_id::text, count(*) FROM order_lines l
		WHERE l.order_id = ANY($1::uuid[]) AND l.kind = 'external' AND NOT EXISTS (
			SELECT 1 FROM outbox_messages m
			WHERE m.order_id = l.order_id AND m.line_no = l.line_no AND m.required AND m.state = 'delivered')
		GROUP BY l.order_id`, orderIDs)
	err = forEachRow(rows, func(r pgx.Rows) error {
		var (
			id string
			n  int
		)
		if err := r.Scan(&id, &n); err != nil {
			return err
		}
		undelivered[id] = n
		return nil
	})
	if err != nil {
		return queued{}, fmt.Errorf("counting undelivered lines: %w", interpret(err))
	}
	w := s.newEffectWriter()
	for _, o := range orders {
		w.versions[o.ref.OrderID] = o.version
		if err := w.orderDelivered(o.ref, o.state, o.total, fulfillment.DecideDelivered(o.state, undelivered[o.ref.OrderID])); err != nil {
			return queued{}, err
		}
	}
	b := &pgx.Batch{}
	q, err := w.write(b)
	if err != nil {
		return q, err
	}
	if b.Len() == 0 {
		return q, nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return q, fmt.Errorf("completing orders: %w", interpret(err))
	}
	return q, nil
}

// optInt is n, or NULL when it is 0.
func optInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}
