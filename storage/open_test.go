package storage_test

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/fulfillplatform/fulfillment/storage"
)

// Each group commit of received webhooks holds a pool connection while it
// runs: a store whose flushers would take every connection is refused
// before it connects, whether the pool's size is given or pgx's default
// (4, or the number of CPUs).
func TestOpenRefusesFlushersThatTakeThePool(t *testing.T) {
	t.Parallel()
	const unreachable = "postgres://127.0.0.1:1/none" // never dialled
	cases := []struct {
		name string
		o    storage.Options
		want string
	}{
		{"max_conns given", storage.Options{MaxConns: 4, InsertFlushers: 4}, "4 group commits of received webhooks (inbox.receipt_flushers) need a connection pool larger than 4"},
		{"the default flushers", storage.Options{MaxConns: 2}, "2 group commits of received webhooks (inbox.receipt_flushers) need a connection pool larger than 2"},
	}
	if runtime.NumCPU() <= 16 {
		cases = append(cases, struct {
			name string
			o    storage.Options
			want string
		}{"pgx's default pool", storage.Options{InsertFlushers: 16}, "16 group commits of received webhooks"})
	}
	for _, tc := range cases {
		s, err := storage.Open(context.Background(), unreachable, tc.o)
		if err == nil {
			s.Close()
			t.Errorf("%s: opened", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A database URL may hold a password: a URL that does not parse is
// refused without echoing it, by every way in, also in the keyword/value
// form with blanks around '=' (libpq's syntax) and a URL naming its
// password as a parameter, which pgx's own redaction misses.
func TestMalformedDatabaseURLIsNotEchoed(t *testing.T) {
	t.Parallel()
	const secret = "DBPASS_s3cr3t"
	urls := []string{
		"postgres://user:" + secret + "@127.0.0.1:1/db?sslmode=bogus",
		"host=127.0.0.1 port=1 user=u password = " + secret + " dbname=x connect_timeout=abc",
		"postgres://user:" + secret + ":more@localhost:%zz/db",
		"postgres://user@127.0.0.1:1/db?password=" + secret + "&sslmode=bogus",
	}
	ctx := context.Background()
	for _, u := range urls {
		errs := map[string]error{"Migrate": storage.Migrate(ctx, u, storage.LockWait{})}
		_, errs["MigrationStatusOf"] = storage.MigrationStatusOf(ctx, u)
		s, err := storage.Open(ctx, u, storage.Options{})
		if err == nil {
			s.Close()
		}
		errs["Open"] = err
		for name, err := range errs {
			if err == nil {
				t.Errorf("%s(%q): no error", name, u)
				continue
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error quotes the password: %v", name, err)
			}
		}
	}
}
