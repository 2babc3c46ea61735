package storage_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fulfillplatform/fulfillment/storage"
)

// A pipelined transaction commits everything or nothing, whichever of its
// round trips a statement fails in, and never leaves a connection in a
// transaction; a callback's failure after its COMMIT ran says so.
func TestPipelinedTransaction(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE pipelined (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	errCallback := errors.New("callback failed")
	for _, tc := range []struct { //nolint:paralleltest // the cases share one table, one after the other
		name             string
		first, mid, last []string
		failLast         error
		swallowMid       bool  // the mid statements' errors are ignored
		want             []int // the rows committed
		wantCode         string
		wantErr          error
	}{
		{name: "committed", first: []string{"INSERT INTO pipelined VALUES (1)"}, mid: []string{"INSERT INTO pipelined VALUES (2)"},
			last: []string{"INSERT INTO pipelined VALUES (3)"}, want: []int{1, 2, 3}},
		{name: "committed at the end", first: []string{"INSERT INTO pipelined VALUES (1)"}, want: []int{1}},
		{name: "the first round trip fails", first: []string{"INSERT INTO pipelined VALUES (1)", "INSERT INTO pipelined VALUES (1)"},
			last: []string{"INSERT INTO pipelined VALUES (3)"}, wantCode: "23505"},
		{name: "the last round trip fails", first: []string{"INSERT INTO pipelined VALUES (1)"},
			last:     []string{"INSERT INTO pipelined VALUES (2)", "INSERT INTO pipelined VALUES (1)", "INSERT INTO pipelined VALUES (3)"},
			wantCode: "23505"},
		{name: "a statement between fails", first: []string{"INSERT INTO pipelined VALUES (1)"}, mid: []string{"SELECT 1/0"},
			last: []string{"INSERT INTO pipelined VALUES (3)"}, wantCode: "22012"},
		{name: "the COMMIT fails", first: []string{
			"CREATE TEMP TABLE deferred (id int UNIQUE DEFERRABLE INITIALLY DEFERRED) ON COMMIT DROP",
			"INSERT INTO pipelined VALUES (1)"},
			last: []string{"INSERT INTO deferred VALUES (1), (1)"}, wantCode: "23505"},
		{name: "an error ignored between, nothing after", first: []string{"INSERT INTO pipelined VALUES (1)"},
			mid: []string{"SELECT 1/0"}, swallowMid: true, wantErr: storage.ErrRolledBackAtCommit},
		{name: "an error ignored between, statements after", first: []string{"INSERT INTO pipelined VALUES (1)"},
			mid: []string{"SELECT 1/0"}, swallowMid: true, last: []string{"INSERT INTO pipelined VALUES (3)"}, wantCode: "25P02"},
		{name: "a callback fails once all ran", first: []string{"INSERT INTO pipelined VALUES (1)"},
			last: []string{"INSERT INTO pipelined VALUES (2)"}, failLast: errCallback, want: []int{1, 2}, wantErr: storage.ErrCommittedUnread},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := conn.Exec(ctx, `TRUNCATE pipelined`); err != nil {
				t.Fatal(err)
			}
			err := s.PipelinedForTest(ctx, tc.first, tc.mid, tc.last, tc.failLast, tc.swallowMid)
			var pgErr *pgconn.PgError
			switch {
			case tc.wantCode != "" && (!errors.As(err, &pgErr) || pgErr.Code != tc.wantCode):
				t.Fatalf("error %v, want SQLSTATE %s", err, tc.wantCode)
			case tc.wantErr != nil && (!errors.Is(err, tc.wantErr) || tc.failLast != nil && !errors.Is(err, errCallback)):
				t.Fatalf("error %v, want %v (and the callback's, if it failed)", err, tc.wantErr)
			case tc.wantCode == "" && tc.wantErr == nil && err != nil:
				t.Fatal(err)
			}
			rows, _ := conn.Query(ctx, `SELECT id FROM pipelined ORDER BY id`)
			got, err := pgx.CollectRows(rows, pgx.RowTo[int])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("rows committed %v, want %v", got, tc.want)
			}
			var inTx int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&inTx); err != nil {
				t.Fatal(err)
			}
			if inTx != 0 {
				t.Fatalf("%d connections left in a transaction", inTx)
			}
		})
	}
}
