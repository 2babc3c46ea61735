package storage_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
)

// readRef is a subscription as CreateSubscription names one.
func readRef(org, providerID, customer, plan string) fulfillment.SubscriptionRef {
	return fulfillment.SubscriptionRef{OrgID: org, Environment: fulfillment.EnvLive, Provider: fulfillment.ProviderYolfi,
		ProviderSubscriptionID: providerID, CustomerRef: customer, PlanID: plan}
}

// payPeriods records n monthly periods of subscription id paid, the first
// starting at start, as the rules would have: behind the store's back, so
// that these tests read what is stored whatever writes it.
func payPeriods(t *testing.T, conn *pgx.Conn, id string, start time.Time, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `
		INSERT INTO subscription_periods (subscription_id, period, period_key, payment_id, starts_at, ends_at)
		SELECT $1::uuid, g, 'invoice:inv_' || g, 'pay_' || g, $2::timestamptz + (g - 1) * interval '1 month',
			$2::timestamptz + g * interval '1 month'
		FROM generate_series(1, $3::int) AS g`, id, start, n); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `
		UPDATE subscriptions SET periods = $3, period_start = $2::timestamptz + ($3 - 1) * interval '1 month',
			period_end = $2::timestamptz + $3 * interval '1 month', last_event_at = $2::timestamptz + ($3 - 1) * interval '1 month',
			updated_at = now()
		WHERE id = $1::uuid`, id, start, n); err != nil {
		t.Fatal(err)
	}
}

// Creating is idempotent on the provider key, also when the requests race;
// the same key with another customer or plan is a conflict that changes
// nothing and does not quote the customer.
func TestSubscriptionCreateIdempotent(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	ref := readRef("org_a", "sub_1", "user_42", "pro-monthly")

	var (
		mu      sync.Mutex
		ids     = map[string]int{}
		created int
	)
	racing(8, func() {
		rec, isNew, err := s.SubscriptionCreate(ctx, ref)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		ids[rec.ID]++
		if isNew {
			created++
		}
	})
	if len(ids) != 1 || created != 1 {
		t.Fatalf("8 racing creates: ids %v, %d created; want one subscription created once", ids, created)
	}
	rec, isNew, err := s.SubscriptionCreate(ctx, ref)
	if err != nil || isNew || ids[rec.ID] != 8 {
		t.Fatalf("repeat = %+v, %v, %v; want the same subscription, not created", rec, isNew, err)
	}
	if rec.State != fulfillment.SubActive || rec.Periods != 0 || !rec.PeriodEnd.IsZero() || rec.AccessEnded ||
		rec.SubscriptionRef != ref || rec.CreatedAt.IsZero() {
		t.Errorf("created subscription = %+v, want active, no period paid, as named", rec)
	}

	for name, other := range map[string]fulfillment.SubscriptionRef{
		"customer": readRef("org_a", "sub_1", "user_43", "pro-monthly"),
		"plan":     readRef("org_a", "sub_1", "user_42", "pro-yearly"),
	} {
		_, _, err := s.SubscriptionCreate(ctx, other)
		if !errors.Is(err, fulfillment.ErrConflict) {
			t.Errorf("same key, another %s: %v, want ErrConflict", name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, rec.ID) || strings.Contains(msg, "user_4") {
			t.Errorf("conflict %q: want the existing subscription named, the customers not", msg)
		}
	}
	// Another provider or environment is another subscription.
	test := ref
	test.Environment = fulfillment.EnvTest
	tbank := ref
	tbank.Provider = fulfillment.ProviderTBank
	for _, r := range []fulfillment.SubscriptionRef{test, tbank} {
		if _, isNew, err := s.SubscriptionCreate(ctx, r); err != nil || !isNew {
			t.Errorf("%s/%s: %v, %v; want created", r.Environment, r.Provider, isNew, err)
		}
	}
	if n := count(t, conn, "SELECT count(*) FROM subscriptions"); n != 3 {
		t.Errorf("%d subscriptions, want 3", n)
	}
}

// Get returns the subscription with its newest paid periods, oldest first,
// and counts those left out.
func TestSubscriptionGetPeriods(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	jan := time.Date(2027, 1, 1, 10, 0, 0, 0, time.UTC)

	fresh, _, err := s.SubscriptionCreate(ctx, readRef("org_a", "sub_new", "user_1", "pro-monthly"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.SubscriptionGet(ctx, fresh.ID)
	if err != nil || d.ID != fresh.ID || len(d.Periods) != 0 || d.Omitted != 0 {
		t.Fatalf("unpaid subscription = %+v, %v; want it without periods", d, err)
	}

	paid, _, err := s.SubscriptionCreate(ctx, readRef("org_a", "sub_paid", "user_2", "pro-monthly"))
	if err != nil {
		t.Fatal(err)
	}
	payPeriods(t, conn, paid.ID, jan, 3)
	d, err = s.SubscriptionGet(ctx, paid.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.SubscriptionRecord.Periods != 3 || !d.PeriodStart.Equal(jan.AddDate(0, 2, 0)) || !d.PeriodEnd.Equal(jan.AddDate(0, 3, 0)) || d.Omitted != 0 {
		t.Errorf("paid subscription = %+v, want 3 periods, the current one from March", d.SubscriptionRecord)
	}
	if len(d.Periods) != 3 {
		t.Fatalf("periods = %+v, want 3", d.Periods)
	}
	for i, p := range d.Periods {
		n := i + 1
		if p.Period != n || !p.Start.Equal(jan.AddDate(0, i, 0)) || !p.End.Equal(jan.AddDate(0, n, 0)) ||
			p.Bill != fmt.Sprintf("invoice:inv_%d", n) || p.PaymentID != fmt.Sprintf("pay_%d", n) || p.CreatedAt.IsZero() {
			t.Errorf("period %d = %+v", i, p)
		}
	}

	long, _, err := s.SubscriptionCreate(ctx, readRef("org_a", "sub_long", "user_3", "pro-monthly"))
	if err != nil {
		t.Fatal(err)
	}
	payPeriods(t, conn, long.ID, jan, fulfillment.MaxSubscriptionPeriods+7)
	d, err = s.SubscriptionGet(ctx, long.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Periods) != fulfillment.MaxSubscriptionPeriods || d.Omitted != 7 ||
		d.Periods[0].Period != 8 || d.Periods[len(d.Periods)-1].Period != fulfillment.MaxSubscriptionPeriods+7 {
		t.Errorf("long subscription: %d periods (%d to %d), %d omitted; want the newest %d, 7 omitted",
			len(d.Periods), d.Periods[0].Period, d.Periods[len(d.Periods)-1].Period, d.Omitted, fulfillment.MaxSubscriptionPeriods)
	}

	if _, err := s.SubscriptionGet(ctx, "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b"); !errors.Is(err, fulfillment.ErrNotFound) {
		t.Errorf("unknown id: %v, want ErrNotFound", err)
	}
}

// Listing filters by every field and by the caller's orgs, newest first,
// and continues below an id.
func TestSubscriptionListFilters(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	var all []string // ids, oldest first
	add := func(ref fulfillment.SubscriptionRef) string {
		t.Helper()
		rec, _, err := s.SubscriptionCreate(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, rec.ID)
		return rec.ID
	}
	a1 := add(readRef("org_a", "s1", "user_1", "pro-monthly"))
	a2 := add(readRef("org_a", "s2", "user_1", "pro-yearly"))
	a3 := add(readRef("org_a", "s3", "user_2", "pro-monthly"))
	testRef := readRef("org_a", "s4", "user_1", "pro-monthly")
	testRef.Environment = fulfillment.EnvTest
	a4 := add(testRef)
	b1 := add(readRef("org_b", "s5", "user_1", "pro-monthly"))
	if _, err := conn.Exec(ctx, `UPDATE subscriptions SET state = 'cancelled' WHERE id = $1::uuid`, a3); err != nil {
		t.Fatal(err)
	}

	list := func(f fulfillment.SubscriptionFilter, before string, limit int) []string {
		t.Helper()
		recs, err := s.SubscriptionList(ctx, f, before, limit)
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{}
		for _, r := range recs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	newest := slices.Clone(all)
	slices.Reverse(newest)
	for _, tc := range []struct {
		name string
		f    fulfillment.SubscriptionFilter
		want []string
	}{
		{"all", fulfillment.SubscriptionFilter{}, newest},
		{"org", fulfillment.SubscriptionFilter{OrgID: "org_a"}, []string{a4, a3, a2, a1}},
		{"environment", fulfillment.SubscriptionFilter{Environment: fulfillment.EnvTest}, []string{a4}},
		{"customer", fulfillment.SubscriptionFilter{OrgID: "org_a", CustomerRef: "user_1"}, []string{a4, a2, a1}},
		{"plan", fulfillment.SubscriptionFilter{PlanID: "pro-yearly"}, []string{a2}},
		{"state", fulfillment.SubscriptionFilter{State: fulfillment.SubCancelled}, []string{a3}},
		{"customer and plan", fulfillment.SubscriptionFilter{Environment: fulfillment.EnvLive, CustomerRef: "user_1", PlanID: "pro-monthly"}, []string{b1, a1}},
		{"visible orgs", fulfillment.SubscriptionFilter{VisibleOrgs: []string{"org_b"}}, []string{b1}},
		{"visible orgs and another org", fulfillment.SubscriptionFilter{VisibleOrgs: []string{"org_b"}, OrgID: "org_a"}, []string{}},
		{"no visible org", fulfillment.SubscriptionFilter{VisibleOrgs: []string{}}, []string{}},
	} {
		if got := list(tc.f, "", 50); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// Pages of two, each continuing below the last id of the one before.
	var paged []string
	before := ""
	for {
		page := list(fulfillment.SubscriptionFilter{}, before, 2)
		paged = append(paged, page...)
		if len(page) < 2 {
			break
		}
		before = page[len(page)-1]
	}
	if !slices.Equal(paged, newest) {
		t.Errorf("paged %v, want %v", paged, newest)
	}
}

// SubscriptionsOf reads one customer's subscriptions to one plan, newest
// first: the newest MaxSubscriptionsChecked and the older ones that may
// still grant access, with what AccessAt needs.
func TestSubscriptionsOfBound(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	var ids []string
	for i := range fulfillment.MaxSubscriptionsChecked + 5 {
		rec, _, err := s.SubscriptionCreate(ctx, readRef("org_a", fmt.Sprintf("sub_%d", i), "user_1", "pro-monthly"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	for _, other := range []fulfillment.SubscriptionRef{
		readRef("org_a", "other_customer", "user_2", "pro-monthly"),
		readRef("org_a", "other_plan", "user_1", "pro-yearly"),
		readRef("org_b", "other_org", "user_1", "pro-monthly"),
	} {
		if _, _, err := s.SubscriptionCreate(ctx, other); err != nil {
			t.Fatal(err)
		}
	}
	jan := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	newestID := ids[len(ids)-1]
	payPeriods(t, conn, newestID, jan, 2)
	plan := fulfillment.Plan{ID: "pro-monthly", Period: fulfillment.Period{Months: 1}, Grace: 72 * time.Hour}
	access := func(want int) []fulfillment.SubscriptionRecord {
		t.Helper()
		subs, err := s.SubscriptionsOf(ctx, "org_a", fulfillment.EnvLive, "user_1", "pro-monthly")
		if err != nil {
			t.Fatal(err)
		}
		if len(subs) != want {
			t.Fatalf("%d subscriptions, want %d", len(subs), want)
		}
		for i, sub := range subs[:fulfillment.MaxSubscriptionsChecked] {
			if want := ids[len(ids)-1-i]; sub.ID != want || sub.CustomerRef != "user_1" || sub.PlanID != "pro-monthly" {
				t.Errorf("subscription %d = %s (%s, %s), want %s", i, sub.ID, sub.CustomerRef, sub.PlanID, want)
			}
		}
		return subs
	}

	subs := access(fulfillment.MaxSubscriptionsChecked)
	if first := subs[0]; first.Periods != 2 || !first.PeriodEnd.Equal(jan.AddDate(0, 2, 0)) {
		t.Errorf("newest = %+v, want its 2 paid periods", first)
	}
	if a, id := fulfillment.CheckAccess(subs, plan, jan.AddDate(0, 1, 10)); !a.Granted || id != newestID || !a.Until.Equal(jan.AddDate(0, 2, 0)) {
		t.Errorf("CheckAccess = %+v, %s; want granted until the end of the second period by %s", a, id, newestID)
	}

	// The oldest subscription, past the newest MaxSubscriptionsChecked,
	// paid three periods: it is read too, and grants the longest. The
	// second oldest paid as many and its access ended: it grants nothing,
	// and is not read.
	payPeriods(t, conn, ids[0], jan, 3)
	payPeriods(t, conn, ids[1], jan, 3)
	if _, err := conn.Exec(ctx, `UPDATE subscriptions SET state = 'expired', access_ended_at = $2 WHERE id = $1::uuid`,
		ids[1], jan.AddDate(0, 0, 20)); err != nil {
		t.Fatal(err)
	}
	subs = access(fulfillment.MaxSubscriptionsChecked + 1)
	if last := subs[len(subs)-1]; last.ID != ids[0] || last.Periods != 3 {
		t.Errorf("the last read is %s with %d periods, want the oldest, %s, with 3", last.ID, last.Periods, ids[0])
	}
	if a, id := fulfillment.CheckAccess(subs, plan, jan.AddDate(0, 1, 10)); !a.Granted || id != ids[0] || !a.Until.Equal(jan.AddDate(0, 3, 0)) {
		t.Errorf("CheckAccess = %+v, %s; want granted until the end of the third period by %s", a, id, ids[0])
	}
	if subs, err := s.SubscriptionsOf(ctx, "org_a", fulfillment.EnvTest, "user_1", "pro-monthly"); err != nil || len(subs) != 0 {
		t.Errorf("test environment: %v, %v; want none", subs, err)
	}
	var _ fulfillment.SubscriptionReader = (*storage.Store)(nil)
}

// racing runs fn n times at once.
func racing(n int, fn func()) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			fn()
		})
	}
	close(start)
	wg.Wait()
}
