package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// Group commit. Concurrent InboxInsert calls are committed together: a
// few flushers each take every request waiting when they become free and
// insert them with one statement and one commit. Under light load a request
// is flushed alone at once; under heavy load one commit (one WAL flush)
// serves many requests. Each caller returns only after the transaction
// holding its own row has committed.

// insertRequest is one InboxInsert waiting for a flusher.
type insertRequest struct {
	ctx  context.Context
	ev   fulfillment.ProviderEvent
	raw  []byte
	done chan insertResult // buffered: a flusher never blocks on it
}

type insertResult struct {
	receipt fulfillment.InboxReceipt
	err     error
}

// Group commit bounds.
const (
	defaultInsertFlushers = 4
	defaultInsertBatch    = 256
	// flushTimeout bounds one flush; the callers' own deadlines are shorter.
	flushTimeout = 10 * time.Second
)

// inserter owns the flusher goroutines.
type inserter struct {
	store    *Store
	requests chan *insertRequest
	maxBatch int
	stop     chan struct{}
	stopped  chan struct{}
	once     sync.Once
	// notifier tells other replicas about committed inserts.
	notifier *notifier
}

func newInserter(s *Store, flushers, maxBatch int) *inserter {
	in := &inserter{
		store:    s,
		requests: make(chan *insertRequest, maxBatch),
		maxBatch: maxBatch,
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	in.notifier = &notifier{store: s, pending: make(chan struct{}, 1)}
	done := make(chan struct{}, flushers+1)
	go func() {
		defer func() { done <- struct{}{} }()
		in.notifier.run(in.stop)
	}()
	for range flushers {
		go func() {
			defer func() { done <- struct{}{} }()
			in.flushLoop()
		}()
	}
	go func() {
		for range flushers + 1 {
			<-done
		}
		close(in.stopped)
	}()
	return in
}

// close stops the flushers after the batches in progress; it is idempotent.
func (in *inserter) close() {
	in.once.Do(func() { close(in.stop) })
	<-in.stopped
}

var errStoreClosed = fmt.Errorf("%w: store closed", fulfillment.ErrUnavailable)

// InboxInsert implements fulfillment.InboxStore. ON CONFLICT DO NOTHING on
// the event key makes a redelivery a no-op, whatever the concurrency: no
// preceding read decides anything.
func (s *Store) InboxInsert(ctx context.Context, ev fulfillment.ProviderEvent, rawBody []byte) (fulfillment.InboxReceipt, error) {
	req := &insertRequest{ctx: ctx, ev: ev, raw: rawBody, done: make(chan insertResult, 1)}
	select {
	case s.inserter.requests <- req:
	case <-s.inserter.stop:
		return fulfillment.InboxReceipt{}, errStoreClosed
	case <-ctx.Done():
		return fulfillment.InboxReceipt{}, fmt.Errorf("%w: storing inbox event: %w", fulfillment.ErrUnavailable, ctx.Err())
	}
	select {
	case res := <-req.done:
		return res.receipt, res.err
	case <-ctx.Done():
		// The row may still commit: the provider's retry is then a
		// duplicate. Nothing is acknowledged before its commit.
		return fulfillment.InboxReceipt{}, fmt.Errorf("%w: storing inbox event: %w", fulfillment.ErrUnavailable, ctx.Err())
	}
}

func (in *inserter) flushLoop() {
	for {
		var first *insertRequest
		select {
		case first = <-in.requests:
		case <-in.stop:
			return
		}
		batch := []*insertRequest{first}
	drain:
		for len(batch) < in.maxBatch {
			select {
			case r := <-in.requests:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		in.flush(batch)
	}
}

// flush commits a batch; when the batch fails as a whole, each request is
// retried alone, so that one bad row cannot fail its neighbours.
func (in *inserter) flush(batch []*insertRequest) {
	live := batch[:0]
	for _, r := range batch {
		if r.ctx.Err() == nil { // its caller gave up: nobody waits for it
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	receipts, err := in.store.inboxInsertBatch(ctx, live)
	if err == nil {
		for i, r := range live {
			r.done <- insertResult{receipt: receipts[i]}
		}
		return
	}
	if len(live) == 1 || errors.Is(err, fulfillment.ErrUnavailable) {
		for _, r := range live {
			r.done <- insertResult{err: err}
		}
		return
	}
	for _, r := range live {
		receipts, err := in.store.inboxInsertBatch(ctx, []*insertRequest{r})
		if err != nil {
			r.done <- insertResult{err: err}
			continue
		}
		r.done <- insertResult{receipt: receipts[0]}
	}
}

// notifier wakes the workers of other replicas with a NOTIFY after inserts
// commit. It runs outside the insert transactions on purpose: a NOTIFY holds
// a database-wide lock until its transaction commits, which would serialize
// the group commits. Signals arriving while one is sent coalesce into the
// next.
type notifier struct {
	store   *Store
	pending chan struct{}
}

func (n *notifier) signal() {
	select {
	case n.pending <- struct{}{}:
	default: // one is already due
	}
}

func (n *notifier) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-n.pending:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if _, err := n.store.pool.Exec(ctx, "SELECT pg_notify($1, '')", inboxChannel); err != nil {
			n.store.log.Warn("notifying other replicas", "error", err) // they poll meanwhile
		}
		cancel()
	}
}

// eventKey is an inbox row's unique key.
type eventKey struct {
	provider, org, env, eventID string
}

// inboxInsertBatch inserts the batch's events in one transaction and returns
// a receipt per request, in order.
func (s *Store) inboxInsertBatch(ctx context.Context, batch []*insertRequest) ([]fulfillment.InboxReceipt, error) {
	n := len(batch)
	var (
		provider, endpoint, org, env, eventID, typ, kind = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		attemptRef, paymentID, invoiceID, sessionID      = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		merchantID, paylinkID, subscriptionID            = make([]string, n), make([]string, n), make([]string, n)
		token, network, txHash, state                    = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		testMode                                         = make([]bool, n)
		occurred                                         = make([]*time.Time, n)
		amount, decision, reason                         = make([]*string, n), make([]*string, n), make([]*string, n)
		raw                                              = make([][]byte, n)
	)
	for i, r := range batch {
		ev, p := r.ev, r.ev.Payment
		provider[i], endpoint[i], org[i], env[i] = string(ev.Provider), ev.EndpointID, ev.OrgID, string(ev.Environment)
		eventID[i], typ[i], kind[i], testMode[i] = ev.EventID, ev.Type, string(ev.Kind), ev.TestMode
		attemptRef[i], paymentID[i], invoiceID[i], sessionID[i] = p.AttemptRef, p.PaymentID, p.InvoiceID, p.CheckoutSessionID
		merchantID[i], paylinkID[i], subscriptionID[i] = p.MerchantOrderID, p.PaylinkID, p.SubscriptionID
		token[i], network[i], txHash[i], raw[i] = p.Token, p.Network, p.TxHash, r.raw
		if !ev.OccurredAt.IsZero() {
			occurred[i] = &ev.OccurredAt
		}
		if p.HasAmount {
			a := p.Amount.String()
			amount[i] = &a
		}
		state[i] = string(fulfillment.InboxPending)
		if out := fulfillment.Decide(ev, nil); out.Decision == fulfillment.DecisionTestModeIgnored {
			// Stored as evidence, acknowledged, never processed.
			state[i] = string(fulfillment.InboxIgnored)
			d := string(out.Decision)
			decision[i], reason[i] = &d, &out.Reason
		}
	}

	// One statement, one implicit transaction: the rows it returns are
	// only read to the end once it has committed.
	found := make(map[eventKey]fulfillment.InboxReceipt, n)
	pending := false
	rows, _ := s.pool.Query(ctx, `
		WITH ins AS (
			INSERT INTO inbox_events (provider, endpoint_id, org_id, environment, event_id, event_type, kind,
				test_mode, occurred_at, attempt_ref, payment_id, invoice_id, checkout_session_id,
				merchant_order_id, paylink_id, subscription_id, amount, token, network, tx_hash, raw_body,
				state, decision, decision_reason, processed_at)
			SELECT provider, endpoint_id, org_id, environment, event_id, event_type, kind,
				test_mode, occurred_at, nullif(attempt_ref, ''), nullif(payment_id, ''), nullif(invoice_id, ''),
				nullif(checkout_session_id, ''), nullif(merchant_order_id, ''), nullif(paylink_id, ''),
				nullif(subscription_id, ''), amount::numeric, nullif(token, ''), nullif(network, ''),
				nullif(tx_hash, ''), raw_body, state, decision, decision_reason,
				CASE WHEN state = 'pending' THEN NULL ELSE clock_timestamp() END
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
				$8::bool[], $9::timestamptz[], $10::text[], $11::text[], $12::text[], $13::text[],
				$14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[],
				$21::bytea[], $22::text[], $23::text[], $24::text[])
				AS u(provider, endpoint_id, org_id, environment, event_id, event_type, kind,
					test_mode, occurred_at, attempt_ref, payment_id, invoice_id, checkout_session_id,
					merchant_order_id, paylink_id, subscription_id, amount, token, network, tx_hash,
					raw_body, state, decision, decision_reason)
			ON CONFLICT ON CONSTRAINT inbox_events_event_key DO NOTHING
			RETURNING id, state, provider, org_id, environment, event_id)
		SELECT id, state, provider, org_id, environment, event_id FROM ins`,
		provider, endpoint, org, env, eventID, typ, kind, testMode, occurred, attemptRef, paymentID,
		invoiceID, sessionID, merchantID, paylinkID, subscriptionID, amount, token, network, txHash,
		raw, state, decision, reason)
	err := forEachRow(rows, func(r pgx.Rows) error {
		var (
			rec fulfillment.InboxReceipt
			k   eventKey
		)
		if err := r.Scan(&rec.ID, &rec.State, &k.provider, &k.org, &k.env, &k.eventID); err != nil {
			return err
		}
		pending = pending || rec.State == fulfillment.InboxPending
		found[k] = rec
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storing inbox events: %w", interpret(err))
	}
	if len(found) < uniqueKeys(batch) {
		// Redeliveries. The insert waited for any conflicting insert to
		// commit, so this later statement sees every row it skipped.
		rows, _ = s.pool.Query(ctx, `
			SELECT id, state, provider, org_id, environment, event_id FROM inbox_events
			WHERE (provider, org_id, environment, event_id) IN (
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))`,
			provider, org, env, eventID)
		if err := collectReceipts(rows, found, true); err != nil {
			return nil, fmt.Errorf("reading redelivered inbox events: %w", interpret(err))
		}
	}
	if pending {
		s.wakeLocal()
		s.inserter.notifier.signal()
	}
	receipts := make([]fulfillment.InboxReceipt, n)
	for i, r := range batch {
		k := eventKey{string(r.ev.Provider), r.ev.OrgID, string(r.ev.Environment), r.ev.EventID}
		rec, ok := found[k]
		if !ok {
			return nil, fmt.Errorf("storing inbox event %s: row neither inserted nor found", r.ev.EventID)
		}
		receipts[i] = rec
		// The first request of a key in the batch owns a fresh insert; any
		// other request for it is a duplicate.
		rec.Duplicate = true
		found[k] = rec
	}
	return receipts, nil
}

// collectReceipts reads (id, state, key) rows into found, keeping entries
// already there.
func collectReceipts(rows pgx.Rows, found map[eventKey]fulfillment.InboxReceipt, duplicate bool) error {
	defer rows.Close()
	for rows.Next() {
		var (
			r fulfillment.InboxReceipt
			k eventKey
		)
		if err := rows.Scan(&r.ID, &r.State, &k.provider, &k.org, &k.env, &k.eventID); err != nil {
			return err
		}
		if _, ok := found[k]; !ok {
			r.Duplicate = duplicate
			found[k] = r
		}
	}
	return rows.Err()
}

func uniqueKeys(batch []*insertRequest) int {
	keys := make(map[eventKey]struct{}, len(batch))
	for _, r := range batch {
		keys[eventKey{string(r.ev.Provider), r.ev.OrgID, string(r.ev.Environment), r.ev.EventID}] = struct{}{}
	}
	return len(keys)
}
