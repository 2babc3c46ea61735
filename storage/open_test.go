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
