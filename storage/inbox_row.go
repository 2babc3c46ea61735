package storage

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/worker"
)

// inboxRow is an inbox_events row as the service writes and reads it. It
// and inboxColumns are the one mapping between a ProviderEvent and SQL:
// a field of the neutral event is named here, and nowhere else in storage.
// Absent text is NULL (nil), never ”.
type inboxRow struct {
	ID                int64
	Provider          string
	EndpointID        string
	OrgID             string
	Environment       string
	EventID           string
	EventType         string
	Kind              string
	TestMode          bool
	OccurredAt        *time.Time
	AttemptRef        *string
	InvoiceID         *string
	PaymentID         *string
	CheckoutSessionID *string
	MerchantOrderID   *string
	SubscriptionID    *string
	CustomerRef       *string
	Amount            *string // numeric, as text
	Token             *string
	Network           *string
	Currency          *string
	Refs              map[string]string
	RawBody           []byte
	State             string
	Decision          *string
	DecisionReason    *string
	// Set when the event is decided in the transaction that stores it
	// (NULL, 0: as a queued event is stored): when it was received (the
	// time its decision was taken at), the order and the subscription it
	// applied to, and its attempts.
	ReceivedAt            *time.Time
	OrderID               *string
	AppliedSubscriptionID *string
	Attempts              int
	// TraceParent is the W3C traceparent of the call that stored the
	// event, for its processing to join that trace.
	TraceParent *string
}

// inboxColumn maps one column: its name, its SQL type, and the row field
// that holds it.
type inboxColumn struct {
	name string
	// sqlType is the column's type; values travel as arrays of it (a
	// multi-row insert) and are read back as it.
	sqlType string
	// text: the value travels as text and is cast (numeric).
	text  bool
	field func(r *inboxRow) any // a pointer to the field
	array func(rows []inboxRow) any
}

// column describes a column held in a field of type T.
func column[T any](name, sqlType string, field func(r *inboxRow) *T) inboxColumn {
	return inboxColumn{
		name: name, sqlType: sqlType,
		field: func(r *inboxRow) any { return field(r) },
		array: func(rows []inboxRow) any {
			out := make(pgtype.FlatArray[T], len(rows)) // not []T: see nulls
			for i := range rows {
				out[i] = *field(&rows[i])
			}
			return out
		},
	}
}

// numericColumn is a numeric column carried as text.
func numericColumn(name string, field func(r *inboxRow) **string) inboxColumn {
	c := column(name, "numeric", field)
	c.text = true
	return c
}

// uuidColumn is a uuid column carried as text.
func uuidColumn(name string, field func(r *inboxRow) **string) inboxColumn {
	c := column(name, "uuid", field)
	c.text = true
	return c
}

// inboxColumns are the columns the service writes when it stores an event
// and reads when it processes one (id, set by the database, is read only).
var inboxColumns = []inboxColumn{
	column("provider", "text", func(r *inboxRow) *string { return &r.Provider }),
	column("endpoint_id", "text", func(r *inboxRow) *string { return &r.EndpointID }),
	column("org_id", "text", func(r *inboxRow) *string { return &r.OrgID }),
	column("environment", "text", func(r *inboxRow) *string { return &r.Environment }),
	column("event_id", "text", func(r *inboxRow) *string { return &r.EventID }),
	column("event_type", "text", func(r *inboxRow) *string { return &r.EventType }),
	column("kind", "text", func(r *inboxRow) *string { return &r.Kind }),
	column("test_mode", "boolean", func(r *inboxRow) *bool { return &r.TestMode }),
	column("occurred_at", "timestamptz", func(r *inboxRow) **time.Time { return &r.OccurredAt }),
	column("attempt_ref", "text", func(r *inboxRow) **string { return &r.AttemptRef }),
	column("invoice_id", "text", func(r *inboxRow) **string { return &r.InvoiceID }),
	column("payment_id", "text", func(r *inboxRow) **string { return &r.PaymentID }),
	column("checkout_session_id", "text", func(r *inboxRow) **string { return &r.CheckoutSessionID }),
	column("merchant_order_id", "text", func(r *inboxRow) **string { return &r.MerchantOrderID }),
	column("subscription_id", "text", func(r *inboxRow) **string { return &r.SubscriptionID }),
	column("customer_ref", "text", func(r *inboxRow) **string { return &r.CustomerRef }),
	numericColumn("amount", func(r *inboxRow) **string { return &r.Amount }),
	column("token", "text", func(r *inboxRow) **string { return &r.Token }),
	column("network", "text", func(r *inboxRow) **string { return &r.Network }),
	column("currency", "text", func(r *inboxRow) **string { return &r.Currency }),
	column("refs", "jsonb", func(r *inboxRow) *map[string]string { return &r.Refs }),
	column("trace_parent", "text", func(r *inboxRow) **string { return &r.TraceParent }),
}

// inboxWriteColumns are written on insert but not read for processing.
var inboxWriteColumns = []inboxColumn{
	column("raw_body", "bytea", func(r *inboxRow) *[]byte { return &r.RawBody }),
	column("state", "text", func(r *inboxRow) *string { return &r.State }),
	column("decision", "text", func(r *inboxRow) **string { return &r.Decision }),
	column("decision_reason", "text", func(r *inboxRow) **string { return &r.DecisionReason }),
}

// inboxDecidedColumns are written too when an event is decided in the
// transaction that stores it: its id (drawn beforehand), when it was
// received, the order and the subscription it applied to, its attempts.
var inboxDecidedColumns = []inboxColumn{
	column("id", "bigint", func(r *inboxRow) *int64 { return &r.ID }),
	column("received_at", "timestamptz", func(r *inboxRow) **time.Time { return &r.ReceivedAt }),
	uuidColumn("order_id", func(r *inboxRow) **string { return &r.OrderID }),
	uuidColumn("applied_subscription_id", func(r *inboxRow) **string { return &r.AppliedSubscriptionID }),
	column("attempts", "int", func(r *inboxRow) *int { return &r.Attempts }),
}

var (
	inboxQueuedInsert  = slices.Concat(inboxColumns, inboxWriteColumns)
	inboxDecidedInsert = slices.Concat(inboxColumns, inboxWriteColumns, inboxDecidedColumns)
)

// unnestColumns are, for an insert of cols given as one array parameter
// each ($1 on), the column list, the values read from the unnest alias u,
// and the array parameters.
func unnestColumns(cols []inboxColumn) (names, values, arrays string) {
	n, v, a := make([]string, len(cols)), make([]string, len(cols)), make([]string, len(cols))
	for i, c := range cols {
		n[i] = c.name
		arrayType := c.sqlType + "[]"
		v[i] = "u." + c.name
		if c.text {
			arrayType = "text[]"
			v[i] += "::" + c.sqlType
		}
		a[i] = fmt.Sprintf("$%d::%s", i+1, arrayType)
	}
	return strings.Join(n, ", "), strings.Join(v, ", "), strings.Join(a, ", ")
}

// columnArgs are the array parameters of cols for rows, in order.
func columnArgs(rows []inboxRow, cols []inboxColumn, extra int) []any {
	args := make([]any, 0, len(cols)+extra)
	for _, c := range cols {
		args = append(args, c.array(rows))
	}
	return args
}

// inboxInsertSQL inserts the rows given as one array per column (in the
// order of inboxColumns then inboxWriteColumns), skipping events stored
// before, queues the new pending ones (a row of inbox_work each), and
// returns each new row's id, state and key, and whether its work row was
// handed off. The three parameters after the columns are a hand-off
// (worker.Handoff): the first new pending rows, up to its count, are queued
// leased to its owner (NULL: none) for its lease, their claim counted as
// an attempt, as a claim would have left them.
var inboxInsertSQL = func() string {
	names, values, arrays := unnestColumns(inboxQueuedInsert)
	owner, count, lease := len(inboxQueuedInsert)+1, len(inboxQueuedInsert)+2, len(inboxQueuedInsert)+3
	return fmt.Sprintf(`
		WITH stored AS (
			INSERT INTO inbox_events (%[1]s, processed_at)
			SELECT %[2]s, CASE WHEN u.state = 'pending' THEN NULL ELSE clock_timestamp() END
			FROM unnest(%[3]s) AS u(%[1]s)
			ON CONFLICT ON CONSTRAINT inbox_events_event_key DO NOTHING
			RETURNING id, state, provider, org_id, environment, event_id
		), queued AS (
			INSERT INTO inbox_work (id, lease_owner, lease_until, next_attempt_at, attempts)
			SELECT id, CASE WHEN handed THEN $%[4]d::text END,
				CASE WHEN handed THEN clock_timestamp() + $%[6]d::interval END,
				clock_timestamp() + CASE WHEN handed THEN $%[6]d::interval ELSE interval '0' END,
				CASE WHEN handed THEN 1 ELSE 0 END
			FROM (SELECT id, $%[4]d::text IS NOT NULL AND row_number() OVER (ORDER BY id) <= $%[5]d::int AS handed
				FROM stored WHERE state = 'pending') p
			RETURNING id, lease_owner IS NOT NULL AS handed
		)
		SELECT s.*, coalesce(q.handed, false) FROM stored s LEFT JOIN queued q USING (id)`,
		names, values, arrays, owner, count, lease)
}()

// inboxInsertArgs are the arguments of inboxInsertSQL for rows, with
// hand-off h.
func inboxInsertArgs(rows []inboxRow, h worker.Handoff) []any {
	return append(columnArgs(rows, inboxQueuedInsert, 3), opt(h.Owner), h.N, h.Lease)
}

// inboxEventKey is the unique key of an event in the inbox.
const inboxEventKey = "inbox_events_event_key"

// inboxInsertDecidedSQL inserts rows decided in the transaction that
// stores them, with their ids (drawn from the table's sequence beforehand,
// as decidedStartSQL does, so that the effects sent in the same round trip
// can name them), and returns what inboxInsertSQL returns (none is
// queued: a decided row is never pending). The batch's events were looked
// up first: an event stored since is an error on inboxEventKey, and the
// batch is tried again (a conflict clause would cost every row a
// speculative insertion and its WAL record). A row's processed_at follows
// the rows' order, a microsecond apart at least: the order they were
// decided in. Its arguments are inboxDecidedArgs.
var inboxInsertDecidedSQL = func() string {
	names, values, arrays := unnestColumns(inboxDecidedInsert)
	return fmt.Sprintf(`
		INSERT INTO inbox_events (%[1]s, processed_at) OVERRIDING SYSTEM VALUE
		SELECT %[2]s, clock_timestamp() + u.n * interval '1 microsecond'
		FROM unnest(%[3]s) WITH ORDINALITY AS u(%[1]s, n)
		RETURNING id, state, provider, org_id, environment, event_id, false`, names, values, arrays)
}()

// inboxDecidedArgs are the arguments of inboxInsertDecidedSQL for rows.
func inboxDecidedArgs(rows []inboxRow) []any { return columnArgs(rows, inboxDecidedInsert, 0) }

// inboxSelectList reads id and inboxColumns, in scanDest's order.
var inboxSelectList = func() string {
	exprs := []string{"id"}
	for _, c := range inboxColumns {
		e := c.name
		if c.text {
			e += "::text"
		}
		exprs = append(exprs, e)
	}
	return strings.Join(exprs, ", ")
}()

// scanDest are the fields inboxSelectList reads into.
func (r *inboxRow) scanDest() []any {
	dest := []any{&r.ID}
	for _, c := range inboxColumns {
		dest = append(dest, c.field(r))
	}
	return dest
}

// nulls is a column of nullable values, as one array parameter of a
// multi-row statement. pgx encodes a slice of a type it does not know
// (pointers included) through reflection, with an allocation per element;
// a FlatArray directly.
type nulls[T any] = pgtype.FlatArray[*T]

// opt is s as a nullable column: nil when empty.
func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// str is a nullable column's text, "" for NULL.
func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// inboxRowOf is the row that stores ev.
func inboxRowOf(ev fulfillment.ProviderEvent) inboxRow {
	p := ev.Payment
	r := inboxRow{
		Provider: string(ev.Provider), EndpointID: ev.EndpointID, OrgID: ev.OrgID,
		Environment: string(ev.Environment), EventID: ev.EventID, EventType: ev.Type, Kind: string(ev.Kind),
		TestMode:   ev.TestMode,
		AttemptRef: opt(p.AttemptRef), InvoiceID: opt(p.InvoiceID), PaymentID: opt(p.PaymentID),
		CheckoutSessionID: opt(p.CheckoutSessionID), MerchantOrderID: opt(p.MerchantOrderID),
		SubscriptionID: opt(p.SubscriptionID),
		CustomerRef:    opt(p.CustomerRef),
		Refs:           ev.Refs,
	}
	if r.Refs == nil {
		r.Refs = map[string]string{}
	}
	if !ev.OccurredAt.IsZero() {
		t := ev.OccurredAt
		r.OccurredAt = &t
	}
	r.Amount, r.Token, r.Network, r.Currency = amountColumns(p.Amount)
	return r
}

// event is the event r stores.
func (r inboxRow) event() (fulfillment.ProviderEvent, error) {
	ev := fulfillment.ProviderEvent{
		Provider: fulfillment.Provider(r.Provider), EndpointID: r.EndpointID, OrgID: r.OrgID,
		Environment: fulfillment.Environment(r.Environment), EventID: r.EventID, Type: r.EventType,
		Kind: fulfillment.EventKind(r.Kind), TestMode: r.TestMode,
		Payment: fulfillment.PaymentInfo{
			AttemptRef: str(r.AttemptRef), InvoiceID: str(r.InvoiceID), PaymentID: str(r.PaymentID),
			CheckoutSessionID: str(r.CheckoutSessionID), MerchantOrderID: str(r.MerchantOrderID),
			SubscriptionID: str(r.SubscriptionID),
			CustomerRef:    str(r.CustomerRef),
		},
	}
	if len(r.Refs) > 0 {
		ev.Refs = r.Refs
	}
	if r.OccurredAt != nil {
		ev.OccurredAt = *r.OccurredAt
	}
	var err error
	ev.Payment.Amount, err = amountOf(r.Amount, r.Token, r.Network, r.Currency)
	return ev, err
}

// amountOf reads the columns of an amount (value as text, and its unit);
// a NULL value is no amount.
func amountOf(value, token, network, currency *string) (fulfillment.Amount, error) {
	if value == nil {
		return fulfillment.Amount{}, nil
	}
	v, err := decimal.NewFromString(*value)
	if err != nil {
		return fulfillment.Amount{}, fmt.Errorf("parsing stored amount: %w", err)
	}
	return fulfillment.Amount{Value: v, Unit: fulfillment.Unit{Token: str(token), Network: str(network), Currency: str(currency)}}, nil
}

// amountColumns are the values of a's columns: value (text), token,
// network, currency, each NULL when absent.
func amountColumns(a fulfillment.Amount) (value, token, network, currency *string) {
	if !a.Known() {
		return nil, nil, nil, nil
	}
	return opt(a.Value.String()), opt(a.Unit.Token), opt(a.Unit.Network), opt(a.Unit.Currency)
}
