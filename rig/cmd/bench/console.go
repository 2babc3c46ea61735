package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

// The console phase: the admin console's pages on the database that holds
// the history (≥1,000,000 processed events), with consoleOrders orders
// added, some of whose events they own. Each page is a closed-loop run of
// consoleWorkers clients signed in as an admin of the bench org; the
// latency is the page's, server-rendered, over loopback.
const (
	consoleOrders  = 100_000
	consoleWorkers = 2
)

// consoleScopes lets the bench token read and act everywhere the console
// goes (it is the same token on both history targets: they stay alike).
func consoleScopes(c *config.Config) {
	for i := range c.Auth.Tokens {
		c.Auth.Tokens[i].Scopes = append(c.Auth.Tokens[i].Scopes, config.ScopeAdmin)
	}
}

// consoleSeed adds the orders (one license line, fulfilled; merchant order
// ids hist-1… as the history's events name them), links each to its event
// and a payment attempt, and refreshes the statistics.
const consoleSeed = `
	WITH o AS (
		INSERT INTO orders (id, org_id, environment, merchant_order_id, state, total_currency, total_minor_units,
			settlement_token, settlement_network, settlement_amount, settlement_tolerance, fingerprint, created_at, updated_at)
		SELECT gen_random_uuid(), $1, $2, 'hist-' || g, 'fulfilled', 'USD', 2500, 'USDT', 'TRON', 25, 0, 'bench',
			now() - interval '180 days' + g * interval '10 seconds', now() - interval '180 days' + g * interval '10 seconds'
		FROM generate_series(1, $3::int) AS g
		RETURNING id, merchant_order_id, created_at
	), l AS (
		INSERT INTO order_lines (order_id, line_no, sku, kind, quantity, currency, unit_minor_units)
		SELECT id, 0, 'pro-license', 'license', 1, 'USD', 2500 FROM o
	)
	INSERT INTO payment_attempts (order_id, provider, attempt_ref, state, amount, token, network, created_at, updated_at)
	SELECT id, 'yolfi', 'inv_' || merchant_order_id, 'confirmed', 25, 'USDT', 'TRON', created_at, created_at FROM o`

const consoleLink = `
	UPDATE inbox_events e SET order_id = o.id FROM orders o
	WHERE o.org_id = $1 AND o.environment = $2 AND e.org_id = $1 AND e.environment = $2
		AND e.merchant_order_id = o.merchant_order_id AND o.fingerprint = 'bench'`

// consolePhase measures every console page.
func (b *bench) consolePhase(ctx context.Context, t *target) error {
	n := min(consoleOrders, b.o.historyRows)
	var ids []string
	if err := b.phase(fmt.Sprintf("console: add %d orders to the history database", n), func() error {
		t0 := time.Now()
		if _, err := t.db.Exec(ctx, consoleSeed, benchOrg, benchEnv, n); err != nil {
			return fmt.Errorf("seeding orders: %w", err)
		}
		if _, err := t.db.Exec(ctx, consoleLink, benchOrg, benchEnv); err != nil {
			return fmt.Errorf("linking events: %w", err)
		}
		for _, table := range []string{"orders", "order_lines", "payment_attempts", "inbox_events", "inbox_event_orders"} {
			if _, err := t.db.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
				return err
			}
		}
		rows, err := t.db.Query(ctx, `SELECT id::text FROM orders WHERE fingerprint = 'bench' ORDER BY random() LIMIT 1000`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		b.logf("console: %d orders seeded and linked in %.1fs", n, time.Since(t0).Seconds())
		return rows.Err()
	}); err != nil {
		return err
	}
	client, err := consoleSignIn(ctx, "http://"+t.svc.httpAddr)
	if err != nil {
		return err
	}
	base := "http://" + t.svc.httpAddr + "/console/"
	key := func(i int) int { return (i*7919 + int(time.Now().UnixNano()%1_000_000)) % len(ids) }
	pages := []struct {
		name string
		url  func(i int) string
	}{
		{"overview", func(int) string { return base + "?refresh=off" }},
		{"orders, newest first", func(int) string { return base + "orders" }},
		{"orders, by merchant order id", func(i int) string { return base + fmt.Sprintf("orders?by=merchant_order_id&q=hist-%d", 1+i%n) }},
		{"orders, by payment ref", func(i int) string { return base + fmt.Sprintf("orders?by=payment_ref&q=inv_hist-%d", 1+i%n) }},
		{"an order's story", func(i int) string { return base + "orders/" + ids[key(i)] }},
		{"events, newest first", func(int) string { return base + "events" }},
		{"events, processed payment.confirmed", func(int) string { return base + "events?state=processed&type=payment.confirmed" }},
		{"events of an order", func(i int) string { return base + "events?order_id=" + ids[key(i)] }},
		{"outbox, failed", func(int) string { return base + "outbox?state=failed" }},
		{"reconciliation, open", func(int) string { return base + "reconciliation?state=open" }},
		{"bulk re-drive plan: processed events", func(int) string {
			return base + "redrive?target=events&org_id=" + benchOrg + "&state=processed&type=payment.confirmed"
		}},
		{"audit", func(int) string { return base + "audit" }},
	}
	return b.phase(fmt.Sprintf("console: %d pages, %d clients each", len(pages), consoleWorkers), func() error {
		for _, p := range pages {
			var seq [256]int
			cpu0 := b.cpu.sample()
			res := loadgen.RunClosed(ctx, loadgen.ClosedConfig{Workers: consoleWorkers, Warmup: b.o.warmup, Duration: b.o.reads},
				func(ctx context.Context, w int) (int, error) {
					seq[w%256]++
					return consoleGet(ctx, client, p.url(w*100003+seq[w%256]))
				})
			lvl := LoadLevel{Name: p.name, Concurrency: consoleWorkers, Seconds: round2(res.Elapsed.Seconds()), OK: res.OK,
				PerSecond: round1(res.Throughput()), Latency: res.Latency(), Non200: res.StatusCounts(), CPU: b.cpu.since(cpu0),
				Note: fmt.Sprintf("%s events, %s orders", humanCount(b.o.historyRows), humanCount(n))}
			b.rep.Console = append(b.rep.Console, lvl)
			b.logf("console %s: %.0f req/s  %s  non-200 %d", p.name, lvl.PerSecond, lvl.Latency, lvl.Non200Total())
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return nil
	})
}

// consoleSignIn signs in to the console with the bench token and returns
// a client carrying the session cookie.
func consoleSignIn(ctx context.Context, baseURL string) (*http.Client, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		Transport:     &http.Transport{MaxIdleConnsPerHost: 16},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/console/login",
		strings.NewReader(url.Values{"token": {benchToken}}.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("signing in to the console: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	u, _ := url.Parse(baseURL + "/console/")
	if resp.StatusCode != http.StatusSeeOther || !slices.ContainsFunc(jar.Cookies(u), func(ck *http.Cookie) bool { return ck.Value != "" }) {
		return nil, errors.New("signing in to the console: no session (" + resp.Status + ")")
	}
	return c, nil
}

// consoleGet fetches one page and returns its status; a page that redirects
// (to sign in) is not a 200.
func consoleGet(ctx context.Context, c *http.Client, u string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, http.NoBody)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
