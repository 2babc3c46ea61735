package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
)

// Decisions and states as the service records them (fulfillment package).
const (
	decFulfilled        = "fulfilled"
	decAttemptRecorded  = "attempt_recorded"
	decAttemptExpired   = "attempt_expired"
	decAttemptCancelled = "attempt_cancelled"
	decAlreadyApplied   = "already_applied"
	decDuplicatePayment = "duplicate_payment"
	decUnidentified     = "unidentified_payment"
	decStaleIgnored     = "stale_ignored"
	decUnmatched        = "unmatched"
	decTestModeIgnored  = "test_mode_ignored"
	decIgnoredType      = "ignored_type"

	itemExtraPayment      = "extra_payment"
	itemAmountMismatch    = "amount_mismatch"
	itemUnidentified      = "unidentified_payment"
	itemUnmatchedPayment  = "unmatched_payment"
	itemUncertainDelivery = string(fulfillment.ReconUncertainDelivery)
	itemFailedDelivery    = string(fulfillment.ReconFailedDelivery)
)

// openDB connects to the run's database, waiting until it answers.
func (r *runner) openDB(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(r.cluster.URL("fulfillment"))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	for {
		err := db.Ping(ctx)
		if err == nil {
			return db, nil
		}
		if ctx.Err() != nil {
			db.Close()
			return nil, fmt.Errorf("connecting to the run's database: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// inboxRow is one stored provider event.
type inboxRow struct {
	id        int64
	eventID   string
	endpoint  string
	env       string
	state     string
	decision  string
	orderID   string
	attempts  int
	lastError string
	// subID is the subscription it was applied to; received and
	// processedAt when it was stored and processed; seq its place in
	// processing order (check_subscriptions.go).
	subID                 string
	received, processedAt time.Time
	seq                   int
	// lateMatched: the service queued it again when its order or
	// subscription was created (a replay of its own).
	lateMatched bool
}

type orderRow struct {
	id, env, state         string
	paidAttempt, paidPayID string
}

type itemRow struct {
	kind, state, env, orderID, paymentID string
	messageID                            int64 // its outbox message; 0 for none
	inboxID                              int64 // the stored event that opened it; 0 for none
	subscriptionID                       string
}

// dbState is everything the checks read from the database, read once
// after the inbox settled.
type dbState struct {
	lateMatched int                    // events the service queued again itself (late matching)
	inbox       map[string][]inboxRow  // by provider event id
	byOrder     map[string][]inboxRow  // by order id, in processing order
	orders      map[string]orderRow    // by merchant order id
	eventIDs    map[int64]string       // provider event id by inbox id
	licenses    map[string]int         // by order id
	distinct    map[string]int         // distinct license values by order id
	revoked     map[string]int         // revoked licenses by order id
	ledger      map[string]int         // by order id
	entries     map[string][]ledgerRow // ledger entries by order id
	refunds     map[string][]int64     // partial refunds recorded (payment_refunds), by order id, in kopecks
	items       []itemRow
	attempts    map[string]map[string]string // order id → attempt ref → state
	messages    map[string]outboxRow         // by msgKey
	msgItems    map[int64][]itemRow          // items by outbox message id
	outcomes    map[string]int64             // outbox attempts by outcome
	subs        *subscriptionState

	totalLicenses, distinctLicenses int
	strayLicenses                   int // entitlements outside their line's units, or on a non-license line
	// kept are, per storage.KeptTables, the rows the table holds and how many rows
	// of its source it misses or holds wrongly.
	kept []keptRows
}

// keptRows are what a kept table holds against its source.
type keptRows struct{ rows, wrong int }

// tableRead is one query of loadState: row is called with dest scanned,
// for each row.
type tableRead struct {
	what, query string
	dest        []any
	row         func()
}

// loadState reads the run's database, one query a table (or figure).
func loadState(ctx context.Context, db *pgxpool.Pool) (*dbState, error) {
	s := &dbState{
		inbox: map[string][]inboxRow{}, byOrder: map[string][]inboxRow{}, orders: map[string]orderRow{}, eventIDs: map[int64]string{},
		licenses: map[string]int{}, distinct: map[string]int{}, revoked: map[string]int{}, ledger: map[string]int{},
		entries: map[string][]ledgerRow{}, refunds: map[string][]int64{},
		attempts: map[string]map[string]string{}, messages: map[string]outboxRow{}, msgItems: map[int64][]itemRow{},
		outcomes: map[string]int64{},
	}
	var (
		e               inboxRow
		o               orderRow
		it              itemRow
		m               outboxRow
		mid, orderID    string
		ref, state      string
		n, d, nr        int
		kopecks         int64
		l               ledgerRow
		outcome         string
		outcomeAttempts int64
	)
	reads := []tableRead{
		// Processing order: an event that touches an order commits while
		// it holds the order's row lock, and stamps processed_at after
		// taking it, so processed_at orders each order's events as they
		// were applied.
		{"inbox_events", `
			SELECT id, event_id, endpoint_id, environment, state, coalesce(decision, ''), coalesce(order_id::text, ''),
				attempts, coalesce(last_error, ''), coalesce(applied_subscription_id::text, ''), received_at,
				coalesce(processed_at, received_at),
				EXISTS (SELECT 1 FROM inbox_replays r WHERE r.inbox_event_id = inbox_events.id AND r.replayed_by = 'service')
			FROM inbox_events ORDER BY processed_at NULLS LAST, id`,
			[]any{&e.id, &e.eventID, &e.endpoint, &e.env, &e.state, &e.decision, &e.orderID, &e.attempts, &e.lastError,
				&e.subID, &e.received, &e.processedAt, &e.lateMatched}, func() {
				e.seq++
				s.lateMatched += btoi(e.lateMatched)
				s.inbox[e.eventID] = append(s.inbox[e.eventID], e)
				s.eventIDs[e.id] = e.eventID
				if e.orderID != "" {
					s.byOrder[e.orderID] = append(s.byOrder[e.orderID], e)
				}
			}},
		{"orders", `
			SELECT id::text, merchant_order_id, environment, state, coalesce(paid_attempt_ref, ''), coalesce(paid_payment_id, '')
			FROM orders`,
			[]any{&o.id, &mid, &o.env, &o.state, &o.paidAttempt, &o.paidPayID}, func() {
				if o.env == "live" {
					s.orders[mid] = o
				}
			}},
		{"entitlements", `
			SELECT order_id::text, count(*), count(DISTINCT value), count(*) FILTER (WHERE revoked_at IS NOT NULL)
			FROM entitlements GROUP BY order_id`,
			[]any{&orderID, &n, &d, &nr}, func() { s.licenses[orderID], s.distinct[orderID], s.revoked[orderID] = n, d, nr }},
		{"entitlements", `SELECT count(*), count(DISTINCT value) FROM entitlements`,
			[]any{&s.totalLicenses, &s.distinctLicenses}, func() {}},
		{"entitlements against their lines", `
			SELECT count(*) FROM entitlements e JOIN order_lines l USING (order_id, line_no)
			WHERE l.kind <> 'license' OR e.unit > l.quantity`,
			[]any{&s.strayLicenses}, func() {}},
		{"ledger_entries", `SELECT order_id::text, line_no, movement, minor_units, coalesce(refund_ref, '') FROM ledger_entries`,
			[]any{&orderID, &l.line, &l.movement, &l.minor, &l.ref}, func() {
				s.ledger[orderID]++
				s.entries[orderID] = append(s.entries[orderID], l)
			}},
		{"payment_refunds", `SELECT order_id::text, coalesce(amount, -1)::bigint FROM payment_refunds ORDER BY id`,
			[]any{&orderID, &kopecks}, func() { s.refunds[orderID] = append(s.refunds[orderID], kopecks) }},
		{"reconciliation_items", `
			SELECT kind, state, environment, coalesce(order_id::text, ''), coalesce(payment_id, ''), coalesce(outbox_message_id, 0),
				coalesce(inbox_event_id, 0), coalesce(subscription_id::text, '')
			FROM reconciliation_items ORDER BY id`,
			[]any{&it.kind, &it.state, &it.env, &it.orderID, &it.paymentID, &it.messageID, &it.inboxID, &it.subscriptionID}, func() {
				s.items = append(s.items, it)
				if it.messageID != 0 {
					s.msgItems[it.messageID] = append(s.msgItems[it.messageID], it)
				}
			}},
		{"payment_attempts", `SELECT order_id::text, attempt_ref, state FROM payment_attempts`,
			[]any{&orderID, &ref, &state}, func() {
				if s.attempts[orderID] == nil {
					s.attempts[orderID] = map[string]string{}
				}
				if _, dup := s.attempts[orderID][ref]; dup {
					state = "DUPLICATE"
				}
				s.attempts[orderID][ref] = state
			}},
		{"outbox_messages", `
			SELECT id, destination_id, topic, idempotency_key, coalesce(order_id::text, ''), state, attempts FROM outbox_messages`,
			[]any{&m.id, &m.dest, &m.topic, &m.key, &m.orderID, &m.state, &m.attempts}, func() { s.messages[msgKey(m.dest, m.key)] = m }},
		{"outbox_attempts", `SELECT outcome, count(*) FROM outbox_attempts GROUP BY outcome`,
			[]any{&outcome, &outcomeAttempts}, func() { s.outcomes[outcome] = outcomeAttempts }},
	}
	s.kept = make([]keptRows, len(storage.KeptTables))
	for i, k := range storage.KeptTables {
		reads = append(reads, tableRead{k.Table + " against its source", `
			WITH want AS (` + k.Want + `), got AS (` + k.Got + `)
			SELECT (SELECT count(*) FROM got),
				(SELECT count(*) FROM ((SELECT * FROM want EXCEPT SELECT * FROM got) UNION ALL (SELECT * FROM got EXCEPT SELECT * FROM want)) x)`,
			[]any{&s.kept[i].rows, &s.kept[i].wrong}, func() {}})
	}
	for _, rd := range reads {
		rows, err := db.Query(ctx, rd.query)
		if err == nil {
			_, err = pgx.ForEachRow(rows, rd.dest, func() error { rd.row(); return nil })
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", rd.what, err)
		}
	}
	if err := loadSubscriptions(ctx, db, s); err != nil {
		return nil, err
	}
	return s, nil
}

// verify checks the database and the API against the workload.
func (r *runner) verify(ctx context.Context, db *pgxpool.Pool) error {
	t := time.Now()
	s, err := loadState(ctx, db)
	if err != nil {
		return fmt.Errorf("reading the run's database: %w", err)
	}
	for _, rows := range s.inbox {
		for _, e := range rows {
			if e.attempts > 1 {
				r.rep.Reclaimed++
			}
			r.rep.MaxAttempts = max(r.rep.MaxAttempts, e.attempts)
		}
	}
	r.rep.LateMatched = s.lateMatched
	r.checkStored(s)
	r.checkProcessed(s)
	r.checkOrders(s)
	r.checkTBank(s)
	r.checkOverpaid(s)
	r.checkSubscriptions(s)
	r.checkLateFirst(s)
	r.checkTestMode(s)
	r.checkItems(s)
	r.checkOutbox(s)
	r.rep.OutboxAttempts = s.outcomes
	if err := r.checkAPI(ctx, db, s); err != nil {
		return err
	}
	r.logf("verified in %v", time.Since(t).Round(100*time.Millisecond))
	return nil
}

// addCheck records a finished check.
func (r *runner) addCheck(c Check) { r.rep.Checks = append(r.rep.Checks, c) }

// mid names the order of an event, for messages.
func (r *runner) mid(e *eventPlan) string {
	if e.order < 0 {
		return "(probe)"
	}
	return r.w.orders[e.order].mid
}

func pick(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// truncMap formats at most a few entries of m.
func truncMap(m map[string]int) string {
	keys := slices.Sorted(maps.Keys(m))
	var parts []string
	for i, k := range keys {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("… %d more", len(keys)-10))
			break
		}
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
