package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// A database out of disk space answers every read, and refuses the writes
// that need a new page with SQLSTATE 53100 (disk_full). The test stages that
// answer with a trigger raising it, as PostgreSQL does when a table cannot
// grow: first for the inbox's inserts, then for the payment attempts', which
// the processing of a stored event writes.
//
// While the inbox cannot grow, every webhook is answered 503 (the provider
// retries), never 500. While the attempts cannot, the webhook is stored
// (200) and its processing fails, again and again, past the queue's retry
// budget (5 attempts here): it is tried again without using its attempts,
// so that it is neither failed nor opened as an item for a person, and is
// applied once the disk has room. Throughout, the log names the database's
// shortage, at ERROR, and never calls it unreachable (a watcher's probe, a
// read, would then find it "reachable again" every second); reads go on.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.DB(t)
	sink := &logSink{}
	s := startService(t, dbURL, nil, floodLogger(sink))
	ctx := context.Background()
	o := s.createOrder(t, "live", "full-1")
	paid := event(yolfi.TypePaymentConfirmed, "full-1", "inv_full1")
	// full stages the disk full for table's inserts, with msg as
	// PostgreSQL's message (it has two for this SQLSTATE; msg holds no
	// quote), or ends it (msg "").
	full := func(table, msg string) {
		t.Helper()
		stmt := "DROP TRIGGER disk_full ON " + table
		if msg != "" {
			stmt = "CREATE TRIGGER disk_full BEFORE INSERT ON " + table +
				" FOR EACH STATEMENT EXECUTE FUNCTION disk_full('" + msg + "')"
		}
		if _, err := s.db.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.db.Exec(ctx, `
		CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'disk_full', HINT = 'Check free disk space.';
		END $$`); err != nil {
		t.Fatal(err)
	}

	const (
		noSpace   = `could not extend file "base/16384/16390": No space left on device`
		wroteOnly = `could not extend file "base/16384/16422": wrote only 4096 of 8192 bytes at block 12`
	)
	from := time.Now()
	full("inbox_events", noSpace)
	var during []int
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		during = append(during, s.send(t, liveEP, liveSecret, paid))
	}
	for i, code := range during {
		if code != http.StatusServiceUnavailable {
			t.Errorf("webhook %d with the inbox unable to grow answered %d, want 503 (answers %v)", i, code, during)
		}
	}
	if _, err := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: o.GetId()}); err != nil {
		t.Errorf("GetOrder with the disk full: %v, want the order (reads go on)", err)
	}
	if n := scrape(t, s.restURL).value(t, "fulfillment_db_disk_full_refusals_total"); n < float64(len(during)) {
		t.Errorf("fulfillment_db_disk_full_refusals_total = %v after %d webhooks refused, want at least as many", n, len(during))
	}
	full("inbox_events", "")
	ingestFull := time.Since(from)

	from = time.Now()
	full("payment_attempts", wroteOnly)
	s.sendUntilAcked(t, "the inbox able to grow again", paid, 5*time.Second)
	// Past the budget: 5 attempts of at most 200 ms of backoff each.
	waitFor(t, "the processing failing past the retry budget", func() bool {
		return s.count(t, `SELECT count(*) FROM inbox_events e JOIN inbox_work w USING (id)
			WHERE e.event_id = $1 AND w.last_error LIKE '%53100%' AND e.received_at < clock_timestamp() - interval '3 seconds'`,
			paid.ID) == 1
	})
	if n := s.count(t, "SELECT count(*) FROM inbox_work WHERE state = 'failed'"); n != 0 {
		t.Errorf("%d events failed while the disk was full, want 0: an outage does not use their attempts", n)
	}
	full("payment_attempts", "")
	processFull := time.Since(from)

	s.send(t, liveEP, liveSecret, paid) // a redelivery
	s.settle(t)
	if e := s.effects(t, o.GetId()); e.State != "fulfilled" || e.Licenses != 2 || e.Credits != 1 || e.Attempts != 1 || len(e.Items) != 0 {
		t.Errorf("after the disk was full: %v; want fulfilled once (2 licenses, 1 credit, 1 attempt, no items)", e)
	}
	said := map[string]int{}
	for _, l := range sink.lines() {
		switch {
		case strings.Contains(l, `"msg":"database out of disk space`):
			for _, msg := range []string{"No space left", "wrote only"} {
				if strings.Contains(l, msg) {
					said[msg]++
				}
			}
			if !strings.Contains(l, `"level":"ERROR"`) || !strings.Contains(l, `"code":"53100"`) {
				t.Errorf("the line saying the database is out of disk space: %s; want it at ERROR with the SQLSTATE", l)
			}
		case strings.Contains(l, "unreachable") || strings.Contains(l, "reachable again"):
			t.Errorf("with the disk full, a line calling the database unreachable or back: %s", l)
		case strings.Contains(l, `"msg":"webhook rejected"`) && strings.Contains(l, "53100"):
			// The gateway's line of a 503, with its cause.
		case strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`):
			t.Errorf("with the disk full, a warning or error besides the lines saying so: %s", l)
		}
	}
	// Each stage's message, once per 10 s of it at most: the log's handler
	// lets a cause through once per interval.
	for msg, took := range map[string]time.Duration{"No space left": ingestFull, "wrote only": processFull} {
		if n, most := said[msg], 1+int(took/(10*time.Second)); n < 1 || n > most {
			t.Errorf("%d lines saying the database is out of disk space with %q over %v, want 1 to %d", n, msg, took, most)
		}
	}
}

// The same with a disk that is really full: the payment attempts' table on
// a tablespace of a 1 MiB tmpfs, filled by another table, so that
// PostgreSQL itself refuses to extend it (53100, "No space left on
// device"), while the rest of the database has room. Every webhook is
// stored (200); the payments whose attempt fits on the table's last page
// are applied, the others wait, never failed, past their retry budget.
// Once the other table is dropped, each payment is applied once. Mounting
// needs privileges this test may not have where it runs (it then says so
// and skips; TestDiskFull stands for it).
func TestTablespaceFull(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.DB(t)
	ctx := context.Background()
	admin := pgtest.Conn(t, dbURL)
	ts := smallTablespace(t, admin)

	sink := &logSink{}
	s := startService(t, dbURL, nil, floodLogger(sink))
	const orders = 40
	var ids []string
	for i := range orders {
		ids = append(ids, s.createOrder(t, "live", fmt.Sprintf("ts-%d", i)).GetId())
	}
	for _, stmt := range []string{
		"ALTER TABLE payment_attempts SET TABLESPACE " + ts,
		"CREATE TABLE filler (pad text) TABLESPACE " + ts,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	// Fill it: pages of rows of 1 kB of text that does not compress, until
	// PostgreSQL refuses.
	for filled := false; !filled; {
		_, err := admin.Exec(ctx, "INSERT INTO filler SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 32), generate_series(1, 64) g GROUP BY g")
		switch code := sqlstate(err); {
		case code == "53100":
			filled = true
		case err != nil:
			t.Fatalf("filling the tablespace: %v", err)
		}
	}

	for i := range orders {
		p := event(yolfi.TypePaymentConfirmed, fmt.Sprintf("ts-%d", i), fmt.Sprintf("inv_ts%d", i))
		if code := s.send(t, liveEP, liveSecret, p); code != http.StatusOK {
			t.Fatalf("payment %d with the attempts' table unable to grow answered %d, want 200 (the inbox has room)", i, code)
		}
	}
	// Past the budget: 5 attempts of at most 200 ms of backoff each.
	time.Sleep(3 * time.Second)
	waiting := s.count(t, "SELECT count(*) FROM inbox_work w WHERE w.state = 'pending' AND w.last_error LIKE '%53100%'")
	if n := s.count(t, "SELECT count(*) FROM inbox_work WHERE state = 'failed'"); n != 0 {
		t.Errorf("%d events failed while the disk was full, want 0: an outage does not use their attempts", n)
	}
	if waiting == 0 {
		t.Fatal("no payment waits for the disk: the tablespace was not full for the attempts' table")
	}
	t.Logf("%d of %d payments waited for room", waiting, orders)
	told := 0
	for _, l := range sink.lines() {
		switch {
		case strings.Contains(l, `"msg":"database out of disk space`) && strings.Contains(l, `"code":"53100"`) &&
			strings.Contains(l, "No space left on device"):
			told++
		case strings.Contains(l, "unreachable") || strings.Contains(l, "reachable again"):
			t.Errorf("with the disk full, a line calling the database unreachable or back: %s", l)
		}
	}
	if told == 0 {
		t.Error("no line says the database is out of disk space, with PostgreSQL's own message")
	}
	// An operator's alert: the refusals counted.
	if n := scrape(t, s.restURL).value(t, "fulfillment_db_disk_full_refusals_total"); n < float64(waiting) {
		t.Errorf("fulfillment_db_disk_full_refusals_total = %v with %d payments refused, want at least as many", n, waiting)
	}

	if _, err := admin.Exec(ctx, "DROP TABLE filler"); err != nil {
		t.Fatal(err)
	}
	s.settle(t)
	for i, id := range ids {
		if e := s.effects(t, id); e.State != "fulfilled" || e.Licenses != 2 || e.Credits != 1 || e.Attempts != 1 || len(e.Items) != 0 {
			t.Errorf("order ts-%d after the disk was full: %v; want fulfilled once (2 licenses, 1 credit, 1 attempt, no items)", i, e)
		}
	}
}

// smallTablespace creates a tablespace on a tmpfs of 1 MiB of its own,
// owned by the user the server runs as, and returns its name; it skips the
// test when the tmpfs cannot be mounted. The tablespace stays in the test
// cluster, emptied; the tmpfs is detached.
func smallTablespace(t *testing.T, admin *pgx.Conn) string {
	t.Helper()
	ctx := context.Background()
	var dataDir string
	if err := admin.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir); err != nil {
		t.Skipf("the server's data directory cannot be read with this role (%v)", err)
	}
	fi, err := os.Stat(dataDir)
	if err != nil {
		t.Skipf("the server's data directory is not on this machine (%v)", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Skip("no owner of the server's data directory to give the tablespace")
	}
	dir, err := os.MkdirTemp("", "fulfill-ts-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("size=1m,mode=0700,uid=%d,gid=%d", st.Uid, st.Gid)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		_ = os.Remove(dir)
		t.Skipf("cannot mount a tmpfs here (%v): TestDiskFull stages the disk full instead", err)
	}
	name := "full_" + strings.TrimPrefix(filepath.Base(dir), "fulfill-ts-")
	t.Cleanup(func() {
		// Best effort: the database goes with the test, the tablespace
		// must be empty to be dropped.
		_, _ = admin.Exec(ctx, "ALTER TABLE payment_attempts SET TABLESPACE pg_default")
		_, _ = admin.Exec(ctx, "DROP TABLE IF EXISTS filler")
		_, _ = admin.Exec(ctx, "DROP TABLESPACE IF EXISTS "+name)
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		_ = os.Remove(dir)
	})
	if _, err := admin.Exec(ctx, "CREATE TABLESPACE "+name+" LOCATION '"+dir+"'"); err != nil {
		// A server that does not see the mount (another mount namespace),
		// or a role that may not create tablespaces.
		t.Skipf("cannot create a tablespace on the tmpfs (%v): TestDiskFull stages the disk full instead", err)
	}
	return name
}

// sqlstate is the SQLSTATE of a database error, "" for other errors.
func sqlstate(err error) string {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code
	}
	return ""
}
