package storage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newStore returns a store on a fresh migrated database, and a direct
// connection for counting rows behind the store's back.
func newStore(t *testing.T) (*storage.Store, *pgx.Conn) {
	t.Helper()
	s, conn, _ := openStore(t, storage.Options{MaxConns: 30})
	return s, conn
}

// openStore opens a store with o on a fresh database, and a connection of
// its own to that database, whose URL it returns too; both close with the
// test.
func openStore(t *testing.T, o storage.Options) (*storage.Store, *pgx.Conn, string) {
	t.Helper()
	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := storage.Open(ctx, url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return s, conn, url
}

func spec(t testing.TB, org, merchantID string) fulfillment.OrderSpec {
	t.Helper()
	s, err := fulfillment.OrderDraft{
		OrgID: org, Environment: "live", MerchantOrderID: merchantID,
		Lines: []fulfillment.LineDraft{
			{SKU: "pro-license", Kind: "license", Quantity: 2, Currency: "USD", MinorUnits: 1250},
			{SKU: "credits", Kind: "balance_credit", Quantity: 1, Currency: "USD", MinorUnits: 500, AccountRef: "acct_1"},
		},
		Settlement: &fulfillment.SettlementDraft{Token: "USDT", Network: "TRON", Amount: "30.000000", Tolerance: "0.5"},
	}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func count(t *testing.T, conn *pgx.Conn, query string, args ...any) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// countCheck is a count a test expects: what it counts, its query and
// the count.
type countCheck struct {
	what, query string
	want        int
}

// wantCounts runs each check's query with args and reports each count that
// differs.
func wantCounts(t *testing.T, conn *pgx.Conn, checks []countCheck, args ...any) {
	t.Helper()
	for _, c := range checks {
		if got := count(t, conn, c.query, args...); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
}

func TestOrderCreateGet(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	want := spec(t, "org_a", "m-1")
	created, isNew, err := s.OrderCreate(ctx, want)
	if err != nil || !isNew {
		t.Fatalf("OrderCreate = %v, %v; want created", isNew, err)
	}
	got, err := s.OrderGet(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != fulfillment.StatePendingPayment {
		t.Errorf("state = %s, want pending_payment", got.State)
	}
	if got.Fingerprint() != want.Fingerprint() {
		t.Errorf("stored content differs:\n got %+v\nwant %+v", got.OrderSpec, want)
	}
	if got.Settlement.Amount.String() != "30" || got.Settlement.Tolerance.String() != "0.5" {
		t.Errorf("settlement = %s/%s, want 30/0.5", got.Settlement.Amount, got.Settlement.Tolerance)
	}
	if total := got.Total(); total.MinorUnits != 3000 || total.Currency != "USD" {
		t.Errorf("total = %+v, want 3000 USD", total)
	}
	if _, err := s.OrderGet(ctx, "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b"); !errors.Is(err, fulfillment.ErrNotFound) {
		t.Errorf("OrderGet(unknown) error = %v, want ErrNotFound", err)
	}
}

func TestOrderCreateIdempotent(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	first, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, isNew, err := s.OrderCreate(ctx, spec(t, "org_a", "m-1"))
	if err != nil || isNew || again.ID != first.ID {
		t.Fatalf("repeat = (%s, %v, %v), want (%s, false, nil)", again.ID, isNew, err, first.ID)
	}
	// Same merchant id in another org or environment is another order.
	other := spec(t, "org_b", "m-1")
	if _, isNew, err := s.OrderCreate(ctx, other); err != nil || !isNew {
		t.Fatalf("other org: %v, %v", isNew, err)
	}
	if n := count(t, conn, "SELECT count(*) FROM orders"); n != 2 {
		t.Errorf("orders = %d, want 2", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM order_lines"); n != 4 {
		t.Errorf("order lines = %d, want 4", n)
	}
}

func TestOrderCreateConcurrent(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	const callers = 25
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		ids     = make([]string, callers)
		created = make([]bool, callers)
		errs    = make([]error, callers)
	)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			o, isNew, err := s.OrderCreate(context.Background(), spec(t, "org_a", "race"))
			ids[i], created[i], errs[i] = o.ID, isNew, err
		}()
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("caller %d got order %s, caller 0 got %s", i, ids[i], ids[0])
		}
		if created[i] {
			winners++
		}
	}
	if winners != 1 {
		t.Errorf("%d callers report created, want exactly 1", winners)
	}
	if n := count(t, conn, "SELECT count(*) FROM orders"); n != 1 {
		t.Errorf("orders = %d, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM order_lines"); n != 2 {
		t.Errorf("order lines = %d, want 2", n)
	}
}

// Identical requests naming a checkout session, at once: each gets the one
// order. The insert used to skip a conflict on the merchant order key only,
// so a request that waited on the winner's checkout session failed with the
// unique violation, told as the session paying another order (35 of 2,400
// calls in 300 rounds). A session of another order is still refused, and
// changes nothing.
func TestOrderCreateConcurrentWithCheckoutSession(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	const rounds, callers = 200, 8
	for r := range rounds {
		sp := spec(t, "org_a", fmt.Sprintf("session-race-%d", r))
		sp.CheckoutSessionID = fmt.Sprintf("cs-race-%d", r)
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			ids   = make([]string, callers)
			errs  = make([]error, callers)
		)
		for i := range callers {
			wg.Go(func() {
				<-start
				o, _, err := s.OrderCreate(context.Background(), sp)
				ids[i], errs[i] = o.ID, err
			})
		}
		close(start)
		wg.Wait()
		for i := range callers {
			if errs[i] != nil || ids[i] != ids[0] {
				t.Fatalf("round %d, caller %d: order %s, %v; caller 0 got %s", r, i, ids[i], errs[i], ids[0])
			}
		}
	}
	if n := count(t, conn, "SELECT count(*) FROM orders"); n != rounds {
		t.Fatalf("orders = %d, want %d", n, rounds)
	}

	other := spec(t, "org_a", "another-order")
	other.CheckoutSessionID = "cs-race-0"
	_, _, err := s.OrderCreate(context.Background(), other)
	if !errors.Is(err, fulfillment.ErrConflict) || !strings.Contains(err.Error(), "already pays another order") {
		t.Fatalf("another order with a taken checkout session: %v", err)
	}
	if n := count(t, conn, "SELECT count(*) FROM orders"); n != rounds {
		t.Errorf("orders = %d after the refused one, want %d", n, rounds)
	}
}

func TestOrderCreateConflict(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	first, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-1"))
	if err != nil {
		t.Fatal(err)
	}
	changed := spec(t, "org_a", "m-1")
	changed.Lines[0].Quantity = 3
	if _, _, err := s.OrderCreate(ctx, changed); !errors.Is(err, fulfillment.ErrConflict) {
		t.Fatalf("different content: error = %v, want ErrConflict", err)
	}
	got, err := s.OrderGet(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Lines[0].Quantity != 2 {
		t.Errorf("conflicting request changed the order: quantity = %d", got.Lines[0].Quantity)
	}

	// A checkout session pays one order only.
	a := spec(t, "org_a", "cs-1")
	a.CheckoutSessionID = "cs_123"
	if _, _, err := s.OrderCreate(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := spec(t, "org_a", "cs-2")
	b.CheckoutSessionID = "cs_123"
	if _, _, err := s.OrderCreate(ctx, b); !errors.Is(err, fulfillment.ErrConflict) {
		t.Fatalf("reused checkout session: error = %v, want ErrConflict", err)
	}
	if n := count(t, conn, "SELECT count(*) FROM orders"); n != 2 {
		t.Errorf("orders = %d, want 2", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM order_lines"); n != 4 {
		t.Errorf("order lines = %d, want 4: a refused order left lines behind", n)
	}
}

func TestOrderList(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	for i := range 5 {
		if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", fmt.Sprintf("a-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	testOrder := spec(t, "org_b", "b-0")
	testOrder.Environment = fulfillment.EnvTest
	if _, _, err := s.OrderCreate(ctx, testOrder); err != nil {
		t.Fatal(err)
	}

	list := func(p fulfillment.OrderListParams) []fulfillment.Order {
		t.Helper()
		orders, err := s.OrderList(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return orders
	}
	if got := list(fulfillment.OrderListParams{Limit: 100}); len(got) != 6 {
		t.Errorf("all orders: %d, want 6", len(got))
	}
	visible := list(fulfillment.OrderListParams{Filter: fulfillment.OrderFilter{VisibleOrgs: []string{"org_b"}}, Limit: 100})
	if len(visible) != 1 || visible[0].OrgID != "org_b" {
		t.Errorf("visible to org_b: %+v", visible)
	}
	if got := list(fulfillment.OrderListParams{Filter: fulfillment.OrderFilter{VisibleOrgs: []string{}}, Limit: 100}); len(got) != 0 {
		t.Errorf("no visible orgs: %d orders, want 0", len(got))
	}
	if got := list(fulfillment.OrderListParams{Filter: fulfillment.OrderFilter{Environment: fulfillment.EnvTest}, Limit: 100}); len(got) != 1 {
		t.Errorf("test environment: %d orders, want 1", len(got))
	}
	if got := list(fulfillment.OrderListParams{Filter: fulfillment.OrderFilter{MerchantOrderID: "a-3"}, Limit: 100}); len(got) != 1 || got[0].MerchantOrderID != "a-3" {
		t.Errorf("merchant order a-3: %+v", got)
	}

	// Pages of two, newest first, cover org_a exactly once.
	seen := map[string]bool{}
	var before string
	for page := 0; ; page++ {
		got := list(fulfillment.OrderListParams{Filter: fulfillment.OrderFilter{OrgID: "org_a"}, BeforeID: before, Limit: 2})
		for i, o := range got {
			if seen[o.ID] {
				t.Fatalf("order %s listed twice", o.ID)
			}
			seen[o.ID] = true
			if i > 0 && o.ID >= got[i-1].ID {
				t.Errorf("page %d not newest first", page)
			}
			if len(o.Lines) != 2 {
				t.Errorf("order %s has %d lines, want 2", o.ID, len(o.Lines))
			}
		}
		if len(got) < 2 {
			break
		}
		before = got[len(got)-1].ID
	}
	if len(seen) != 5 {
		t.Errorf("paged through %d org_a orders, want 5", len(seen))
	}
}

// An order's history shows its newest ledger entries, at most
// MaxLedgerItems, oldest first, and counts the ones left out: partial
// refunds add one per credited line, without a bound of their own.
func TestOrderDetailLedgerBounded(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	o, _, err := s.OrderCreate(ctx, spec(t, "org_a", "many-refunds"))
	if err != nil {
		t.Fatal(err)
	}
	const extra = 5
	if _, err := conn.Exec(ctx, `
		INSERT INTO ledger_entries (order_id, line_no, account_ref, movement, currency, minor_units, refund_ref)
		SELECT $1, 1, 'acct_1', 'partial_reversal', 'USD', -1, 'refund-' || g FROM generate_series(1, $2) AS g`,
		o.ID, fulfillment.MaxLedgerItems+extra); err != nil {
		t.Fatal(err)
	}
	d, err := s.OrderDetail(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Ledger) != fulfillment.MaxLedgerItems || d.OmittedLedger != extra {
		t.Fatalf("ledger: %d shown, %d omitted; want %d and %d", len(d.Ledger), d.OmittedLedger, fulfillment.MaxLedgerItems, extra)
	}
	var oldestShown int64
	if err := conn.QueryRow(ctx, "SELECT id FROM ledger_entries WHERE order_id = $1 ORDER BY id OFFSET $2 LIMIT 1", o.ID, extra).Scan(&oldestShown); err != nil {
		t.Fatal(err)
	}
	if d.Ledger[0].ID != oldestShown || d.Ledger[len(d.Ledger)-1].ID <= d.Ledger[0].ID {
		t.Errorf("ledger from %d to %d, want the newest, oldest first, from %d", d.Ledger[0].ID, d.Ledger[len(d.Ledger)-1].ID, oldestShown)
	}
}
