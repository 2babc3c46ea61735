package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
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
		{"conn closed", fmt.Errorf("committing: %w", pgconn.ErrConnClosed), fulfillment.ErrUnavailable},
		{"unexpected EOF", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), fulfillment.ErrUnavailable},
		{"connection reset", fmt.Errorf("writing: %w", syscall.ECONNRESET), fulfillment.ErrUnavailable},
		{"deadline", context.DeadlineExceeded, fulfillment.ErrUnavailable},
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
	}
}
