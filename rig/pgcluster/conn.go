package pgcluster

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATE codes the package reacts to.
const (
	codeCannotConnectNow  = "57P03" // starting up, shutting down or in recovery
	codeDuplicateDatabase = "42P04"
)

// dial logs in as user to database over TCP (trust authentication), bounded
// by ctx and at most a few seconds.
func dial(ctx context.Context, addr, user, database string) (*pgx.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.User, cfg.Database = host, user, database
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, err
	}
	cfg.Port = uint16(p)
	cfg.Password = ""
	cfg.TLSConfig = nil
	cfg.Fallbacks = nil
	cfg.ConnectTimeout = 5 * time.Second
	return pgx.ConnectConfig(ctx, cfg)
}

// sqlState returns the SQLSTATE of a server error, or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
