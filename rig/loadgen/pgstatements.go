package loadgen

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// StatementCost is what a statement cost PostgreSQL over a measured span,
// divided by the events of that span: how often it ran, the time it spent
// executing (waits for locks and the CPU included, the commit's WAL flush
// not), the shared buffers it touched and the WAL it wrote.
type StatementCost struct {
	Query  string  `json:"query"`
	Calls  float64 `json:"calls_per_event"`
	ExecUs float64 `json:"exec_us_per_event"`
	// PlanUs is the time spent planning it (pg_stat_statements.track_planning
	// on; 0 otherwise): a statement run on a custom plan is planned anew
	// at each run.
	PlanUs  float64 `json:"plan_us_per_event"`
	Buffers float64 `json:"buffers_per_event"`
	// The buffers' parts: found in shared buffers, read into them, changed
	// when they were clean, written out by the backend itself (no clean
	// buffer was free).
	Hit      float64 `json:"buffers_hit_per_event"`
	Read     float64 `json:"buffers_read_per_event"`
	Dirtied  float64 `json:"buffers_dirtied_per_event"`
	Written  float64 `json:"buffers_written_per_event"`
	WALBytes float64 `json:"wal_bytes_per_event"`
}

// EnableStatements installs pg_stat_statements in db's database; the
// server must preload the library (shared_preload_libraries).
func EnableStatements(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	return err
}

// ResetStatements starts a measured span: it forgets the statistics of
// every statement so far.
func ResetStatements(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, "SELECT pg_stat_statements_reset()")
	return err
}

// StatementCosts returns the statements run in db's database since
// ResetStatements, the costliest (by execution time) first, at most limit
// of them, and their sum over all statements, each divided by events.
func StatementCosts(ctx context.Context, db *pgxpool.Pool, events, limit int) (top []StatementCost, total StatementCost, err error) {
	rows, _ := db.Query(ctx, `
		SELECT query, calls::float8, total_exec_time * 1000, total_plan_time * 1000,
			shared_blks_hit::float8, shared_blks_read::float8, shared_blks_dirtied::float8, shared_blks_written::float8,
			wal_bytes::float8
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND query NOT LIKE '%pg_stat_statements%'
		ORDER BY total_exec_time + total_plan_time DESC`)
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StatementCost, error) {
		var c StatementCost
		err := r.Scan(&c.Query, &c.Calls, &c.ExecUs, &c.PlanUs, &c.Hit, &c.Read, &c.Dirtied, &c.Written, &c.WALBytes)
		c.Buffers = c.Hit + c.Read + c.Dirtied + c.Written
		return c, err
	})
	if err != nil || events <= 0 {
		return nil, StatementCost{}, err
	}
	n := float64(events)
	total.Query = "all statements"
	for i, c := range all {
		c.Query = strings.Join(strings.Fields(c.Query), " ")
		c.Calls, c.ExecUs, c.PlanUs, c.WALBytes = c.Calls/n, c.ExecUs/n, c.PlanUs/n, c.WALBytes/n
		c.Buffers, c.Hit, c.Read, c.Dirtied, c.Written = c.Buffers/n, c.Hit/n, c.Read/n, c.Dirtied/n, c.Written/n
		total.Calls += c.Calls
		total.ExecUs += c.ExecUs
		total.PlanUs += c.PlanUs
		total.Buffers += c.Buffers
		total.Hit += c.Hit
		total.Read += c.Read
		total.Dirtied += c.Dirtied
		total.Written += c.Written
		total.WALBytes += c.WALBytes
		if i < limit {
			top = append(top, c)
		}
	}
	return top, total, nil
}

// WALImages is the cluster's count of full-page images written to the WAL
// (pg_stat_wal.wal_fpi) and of checkpoints begun (pg_stat_bgwriter, timed
// and requested): a page's first change after a checkpoint writes the whole
// page, so the WAL of a window depends on whether one began in it. The
// backends report their images at most once a second: a reading may miss
// the last second's.
func WALImages(ctx context.Context, db *pgxpool.Pool) (images, checkpoints int64, err error) {
	err = db.QueryRow(ctx, `SELECT (SELECT wal_fpi FROM pg_stat_wal),
		(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)`).Scan(&images, &checkpoints)
	return images, checkpoints, err
}

// WALBytes is the cluster's WAL insert position, in bytes: the
// difference of two readings is the WAL written in between, by every
// database of the cluster — what pg_stat_wal's wal_bytes counts, without
// waiting for the backends to report it (they do so at most once a
// second).
func WALBytes(ctx context.Context, db *pgxpool.Pool) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint").Scan(&n)
	return n, err
}

// TableUpdates are the rows updated in each table of the database db is
// connected to, and how many of those updates were HOT (no new index
// entries), as the backends have reported them so far: a backend reports
// its counts at most once a second, so a reading taken right after a run
// may miss its last second's, of both counts together.
type TableUpdates map[string]UpdateCounts

// UpdateCounts are a table's updates, and the HOT ones among them.
type UpdateCounts struct {
	Updates int64 `json:"updates"`
	HOT     int64 `json:"hot"`
}

// ReadTableUpdates reads TableUpdates from pg_stat_user_tables.
func ReadTableUpdates(ctx context.Context, db *pgxpool.Pool) (TableUpdates, error) {
	rows, err := db.Query(ctx, `SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	t := TableUpdates{}
	for rows.Next() {
		var (
			name string
			c    UpdateCounts
		)
		if err := rows.Scan(&name, &c.Updates, &c.HOT); err != nil {
			return nil, err
		}
		t[name] = c
	}
	return t, rows.Err()
}

// Since are the updates made from before to t, for the tables that had
// any.
func (t TableUpdates) Since(before TableUpdates) TableUpdates {
	d := TableUpdates{}
	for name, c := range t {
		b := before[name]
		if n := c.Updates - b.Updates; n > 0 {
			d[name] = UpdateCounts{Updates: n, HOT: c.HOT - b.HOT}
		}
	}
	return d
}
