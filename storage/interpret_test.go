package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

func TestInterpret(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want error // nil: passed through unchanged
	}{
		{"no rows", pgx.ErrNoRows, fulfillment.ErrNotFound},
		{"unique violation", &pgconn.PgError{Code: "23505"}, fulfillment.ErrConflict},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, fulfillment.ErrUnavailable},
		{"connection failure", &pgconn.PgError{Code: "08006"}, fulfillment.ErrUnavailable},
		{"too many connections", &pgconn.PgError{Code: "53300"}, fulfillment.ErrUnavailable},
		{"login refused", &pgconn.PgError{Code: "28P01"}, fulfillment.ErrUnavailable},
		{"no such role", &pgconn.PgError{Code: "28000"}, fulfillment.ErrUnavailable},
		{"no such database", &pgconn.PgError{Code: "3D000"}, fulfillment.ErrUnavailable},
		{"read-only server", &pgconn.PgError{Code: "25006"}, fulfillment.ErrUnavailable},
		{"conn closed", fmt.Errorf("committing: %w", pgconn.ErrConnClosed), fulfillment.ErrUnavailable},
		{"unexpected EOF", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), fulfillment.ErrUnavailable},
		{"connection reset", fmt.Errorf("writing: %w", syscall.ECONNRESET), fulfillment.ErrUnavailable},
		{"deadline", context.DeadlineExceeded, fulfillment.ErrUnavailable},
		{"deadlock detected", &pgconn.PgError{Code: "40P01"}, fulfillment.ErrUnavailable},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, fulfillment.ErrUnavailable},
		{"syntax error", &pgconn.PgError{Code: "42601"}, nil},
		{"check violation", &pgconn.PgError{Code: "23514"}, nil},
	}
	for _, tc := range cases {
		got := interpret(tc.err)
		if tc.want == nil {
			if got != tc.err { //nolint:errorlint // the very same error, not one wrapping it
				t.Errorf("%s: interpret changed the error to %v", tc.name, got)
			}
			continue
		}
		if !errors.Is(got, tc.want) {
			t.Errorf("%s: interpret = %v, want it to wrap %v", tc.name, got, tc.want)
		}
		// What it classified is kept as it is: a transaction's runner
		// interprets its callbacks' errors again (withPipelinedTx).
		wrapped := fmt.Errorf("recording: %w", got)
		if again := interpret(wrapped); again != wrapped { //nolint:errorlint // the very same error
			t.Errorf("%s: interpret again = %v, want %v unchanged", tc.name, again, wrapped)
		}
	}
}

// A transaction PostgreSQL rolled back (a deadlock) or a statement it
// cancelled (a timeout) is worth retrying, but says nothing of the
// database's reachability; a lost connection does.
func TestRolledBackIsNotUnreachable(t *testing.T) {
	t.Parallel()
	deadlock := interpret(&pgconn.PgError{Code: "40P01"})
	if !rolledBack(deadlock) || rolledBack(interpret(&pgconn.PgError{Code: "08006"})) {
		t.Errorf("rolledBack: deadlock %v, connection failure %v; want true, false",
			rolledBack(deadlock), rolledBack(interpret(&pgconn.PgError{Code: "08006"})))
	}
	s := &Store{log: slog.New(slog.DiscardHandler)}
	if s.unreachable(deadlock) {
		t.Error("a deadlock was taken for an unreachable database")
	}
	if s.unreachable(interpret(&pgconn.PgError{Code: "57014"})) {
		t.Error("a statement cancelled on its timeout was taken for an unreachable database")
	}
}
