package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
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
		// down: an outage of the database (fulfillment.ErrDatabaseDown),
		// which does not use an attempt of the queued work that met it.
		down bool
	}{
		{"no rows", pgx.ErrNoRows, fulfillment.ErrNotFound, false},
		{"unique violation", &pgconn.PgError{Code: "23505"}, fulfillment.ErrConflict, false},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, fulfillment.ErrUnavailable, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, fulfillment.ErrUnavailable, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, fulfillment.ErrUnavailable, true},
		{"disk full", &pgconn.PgError{Code: "53100"}, fulfillment.ErrUnavailable, true},
		// What one call may cause itself, every time it runs: worth a
		// retry, and counted.
		{"out of memory", &pgconn.PgError{Code: "53200"}, fulfillment.ErrUnavailable, false},
		{"temp_file_limit", &pgconn.PgError{Code: "53400"}, fulfillment.ErrUnavailable, false},
		{"protocol violation", &pgconn.PgError{Code: "08P01"}, fulfillment.ErrUnavailable, false},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, fulfillment.ErrUnavailable, true},
		{"starting up", &pgconn.PgError{Code: "57P03"}, fulfillment.ErrUnavailable, true},
		{"login refused", &pgconn.PgError{Code: "28P01"}, fulfillment.ErrUnavailable, true},
		{"no such role", &pgconn.PgError{Code: "28000"}, fulfillment.ErrUnavailable, true},
		{"no such database", &pgconn.PgError{Code: "3D000"}, fulfillment.ErrUnavailable, true},
		{"read-only server", &pgconn.PgError{Code: "25006"}, fulfillment.ErrUnavailable, true},
		{"a standby", errStandby, fulfillment.ErrUnavailable, true},
		{"conn closed", fmt.Errorf("committing: %w", pgconn.ErrConnClosed), fulfillment.ErrUnavailable, true},
		{"unexpected EOF", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), fulfillment.ErrUnavailable, true},
		{"connection reset", fmt.Errorf("writing: %w", syscall.ECONNRESET), fulfillment.ErrUnavailable, true},
		{"deadline", context.DeadlineExceeded, fulfillment.ErrUnavailable, false},
		{"statement timeout", &pgconn.PgError{Code: "57014"}, fulfillment.ErrUnavailable, false},
		{"deadlock detected", &pgconn.PgError{Code: "40P01"}, fulfillment.ErrUnavailable, false},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, fulfillment.ErrUnavailable, false},
		{"syntax error", &pgconn.PgError{Code: "42601"}, nil, false},
		{"check violation", &pgconn.PgError{Code: "23514"}, nil, false},
	}
	// The outages in which the call's connection ended under it (the call
	// may have caused them).
	connectionLost := map[string]bool{"admin shutdown": true, "crash shutdown": true, "connection failure": true,
		"conn closed": true, "unexpected EOF": true, "connection reset": true}
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
		if down := errors.Is(got, fulfillment.ErrDatabaseDown); down != tc.down {
			t.Errorf("%s: interpret = %v, an outage of the database: %v, want %v", tc.name, got, down, tc.down)
		}
		if lost := errors.Is(got, fulfillment.ErrConnectionLost); lost != connectionLost[tc.name] {
			t.Errorf("%s: interpret = %v, its connection lost: %v, want %v", tc.name, got, lost, connectionLost[tc.name])
		}
		if tc.err.Error() != "" && !strings.HasSuffix(got.Error(), tc.err.Error()) {
			t.Errorf("%s: interpret = %q, want it to end with the error's own message %q", tc.name, got, tc.err)
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
