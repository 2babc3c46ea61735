package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// Why the service vacuums its own queues.
//
// Every row of a leased table passes through its claim index twice and
// leaves it: a claim moves next_attempt_at to the end of the lease (a new
// entry at the index's far end), and a decision or a delivery deletes the
// row, or moves it out of 'pending'. The entries left behind sit at the
// head of the index, before the first due row, where every claim starts
// its scan. Once their rows are dead to every transaction a scan marks
// them dead, but it still reads their pages; new entries go to the far
// end, so nothing but VACUUM ever removes those pages. Between two
// autovacuum runs (a minute apart at best, autovacuum_naptime) a queue
// taking 2,000 events a second piles up some hundreds of pages of them,
// and each claim of a few rows walks them all: measured, 693 pages read
// to claim 16 rows after 100,000 had passed, and 4 after a VACUUM.
//
// So the service looks at the dead rows of its queue tables every
// interval (pg_stat_user_tables, which every replica's writes feed) and
// vacuums a table past the threshold. SKIP_LOCKED leaves a table another
// replica (or autovacuum) is vacuuming; INDEX_CLEANUP ON makes the index
// pass happen even when the heap has few dead rows, since the index is
// the point; TRUNCATE false never takes the table's exclusive lock to give
// its empty tail back, which a hot queue would wait on.

// Why it analyzes young tables too.
//
// A batch's statements run on generic plans (batchSettings), which
// PostgreSQL makes once per connection and keeps until an ANALYZE of
// their tables. Made on the statistics of a nearly empty table — a new
// database, its first webhooks — a plan scans the table or a whole index,
// cheapest then, and goes on doing so as the table grows: autovacuum
// analyzes a table at the earliest a minute later. So the same pass
// analyzes each table a batch reads by key once it has changed by more
// rows than it held at its last ANALYZE (and by StaleRows at least): a
// young table about every doubling, an old one never (autovacuum's tenth
// comes first). The ANALYZE makes every connection plan again.

// QueueVacuum tunes the vacuuming of the leased tables. Zero values take
// the defaults.
type QueueVacuum struct {
	// Interval is how often the dead rows are counted (default 1s).
	Interval time.Duration
	// DeadRows is the count of dead rows past which a table is vacuumed
	// (default 2,000: about 14 index pages left for each claim to walk).
	DeadRows int64
	// Timeout bounds one VACUUM or ANALYZE (default 30s).
	Timeout time.Duration
	// StaleRows is the fewest changed rows since a table's last ANALYZE
	// for which the pass analyzes it (default 1,000).
	StaleRows int64
}

// Defaults of QueueVacuum.
const (
	DefaultQueueVacuumInterval = time.Second
	DefaultQueueVacuumDeadRows = 2000
	defaultQueueVacuumTimeout  = 30 * time.Second
	defaultStaleRows           = 1000
)

// WithDefaults is v with its zero values filled in.
func (v QueueVacuum) WithDefaults() QueueVacuum {
	if v.Interval <= 0 {
		v.Interval = DefaultQueueVacuumInterval
	}
	if v.DeadRows <= 0 {
		v.DeadRows = DefaultQueueVacuumDeadRows
	}
	if v.Timeout <= 0 {
		v.Timeout = defaultQueueVacuumTimeout
	}
	if v.StaleRows <= 0 {
		v.StaleRows = defaultStaleRows
	}
	return v
}

// queueTables are the leased tables, vacuumed by VacuumQueues.
var queueTables = []*leasedTable{inboxTable, outboxTable, pollTable, sweepTable, housekeepingTable}

// keyedTables are the tables a batch's statements read by key, analyzed
// when their statistics are stale.
var keyedTables = []string{"inbox_events", "inbox_unresolved", "orders", "order_lines", "payment_attempts",
	"payment_refunds", "payment_starts", "subscriptions", "entitlements", "ledger_entries"}

// staleSQL names the tables among $1 that changed by more rows since their
// last ANALYZE than they held then, and by $2 at least.
const staleSQL = `
	SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
	WHERE s.relid = ANY (SELECT to_regclass(t)::oid FROM unnest($1::text[]) t)
		AND s.n_mod_since_analyze >= greatest($2::bigint, c.reltuples::bigint)
	ORDER BY 1`

// vacuumableSQL names the tables among $1 this session's role may vacuum
// (or analyze):
// their owner (or a member of it), the database's owner, or a superuser.
const vacuumableSQL = `
	SELECT c.relname FROM pg_class c
	WHERE c.oid = ANY (SELECT to_regclass(t)::oid FROM unnest($1::text[]) t)
		AND (pg_has_role(c.relowner, 'USAGE')
			OR pg_has_role((SELECT datdba FROM pg_database WHERE datname = current_database()), 'USAGE')
			OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))
	ORDER BY 1`

// deadRowsSQL counts the dead rows of each table among $1.
const deadRowsSQL = `
	SELECT relname, n_dead_tup FROM pg_stat_user_tables
	WHERE relid = ANY (SELECT to_regclass(t)::oid FROM unnest($1::text[]) t)`

// VacuumQueues vacuums the leased tables whose dead rows pass v.DeadRows,
// counted every v.Interval, until ctx ends. Tables this role may not
// vacuum are named once in the log and left to autovacuum. A failed count
// or VACUUM is logged, and tried again at the next interval.
func (s *Store) VacuumQueues(ctx context.Context, v QueueVacuum) error {
	v = v.WithDefaults()
	names := make([]string, len(queueTables))
	for i, t := range queueTables {
		names[i] = t.table
	}
	var tables, keyed []string
	for {
		rows, _ := s.pool.Query(ctx, vacuumableSQL, append(slices.Clone(names), keyedTables...))
		allowed, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err == nil {
			for _, t := range allowed {
				if slices.Contains(names, t) {
					tables = append(tables, t)
				} else {
					keyed = append(keyed, t)
				}
			}
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := interpret(err); !errors.Is(err, fulfillment.ErrUnavailable) { // an outage is said once, elsewhere
			s.log.Warn("queue vacuum: cannot read which queue tables this role may vacuum; trying again", "err", err)
		}
		if !sleepCtx(ctx, v.Interval*10) {
			return nil
		}
	}
	if len(tables) < len(names) {
		s.log.Info("queue vacuum: this role may not vacuum some queue tables (it does not own them); autovacuum alone keeps their claim scans short",
			"vacuumed", tables, "all", names)
	}
	if len(tables) == 0 && len(keyed) == 0 {
		<-ctx.Done()
		return nil
	}
	vac := queueVacuumer{s: s, v: v, tables: tables, keyed: keyed, floor: make(map[string]int64)}
	warned := false
	for sleepCtx(ctx, v.Interval) {
		n, err := vac.pass(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, fulfillment.ErrUnavailable):
			// The database is unreachable: the service says so once,
			// elsewhere; the vacuum tries again at the next interval.
		case err != nil && !warned:
			s.log.Warn("queue vacuum failed; trying again every interval", "err", err)
			warned = true
		case err == nil:
			warned = false
			if n > 0 {
				s.log.Debug("queue vacuum and analyze", "tables", n)
			}
		}
	}
	return nil
}

// queueVacuumer is VacuumQueues' state between passes.
type queueVacuumer struct {
	s      *Store
	v      QueueVacuum
	tables []string
	keyed  []string // the tables analyzed when stale
	// floor is, for each table vacuumed, the dead rows its last VACUUM
	// could not remove: rows a transaction older than their deletion may
	// still see. A table is vacuumed again once it has DeadRows more than
	// that, so that a long transaction (a backup, a forgotten psql
	// session) does not make every pass vacuum in vain.
	floor map[string]int64
}

// pass vacuums each table that has at least DeadRows dead rows over its
// floor, analyzes the keyed tables whose statistics are stale, and returns
// how many tables it vacuumed or analyzed.
func (q *queueVacuumer) pass(ctx context.Context) (int, error) {
	vacuumed, err := q.vacuumQueues(ctx)
	if err != nil {
		return vacuumed, err
	}
	analyzed, err := q.analyzeStale(ctx)
	return vacuumed + analyzed, err
}

// analyzeStale analyzes the keyed tables whose statistics are stale
// (staleSQL), in one ANALYZE, and returns how many.
func (q *queueVacuumer) analyzeStale(ctx context.Context) (int, error) {
	if len(q.keyed) == 0 {
		return 0, nil
	}
	rows, _ := q.s.pool.Query(ctx, staleSQL, q.keyed, q.v.StaleRows)
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("reading the tables' changes since their statistics: %w", interpret(err))
	}
	if len(stale) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, q.v.Timeout)
	defer cancel()
	names := make([]string, len(stale))
	for i, t := range stale {
		names[i] = pgx.Identifier{t}.Sanitize()
	}
	// SKIP_LOCKED leaves a table another replica or autovacuum analyzes.
	if _, err := q.s.pool.Exec(ctx, "ANALYZE (SKIP_LOCKED) "+strings.Join(names, ", ")); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return 0, fmt.Errorf("analyzing %s: took longer than %s", strings.Join(stale, ", "), q.v.Timeout)
		}
		return 0, fmt.Errorf("analyzing %s: %w", strings.Join(stale, ", "), interpret(err))
	}
	return len(stale), nil
}

// vacuumQueues is pass's VACUUM of the queue tables.
func (q *queueVacuumer) vacuumQueues(ctx context.Context) (int, error) {
	if len(q.tables) == 0 {
		return 0, nil
	}
	counts, err := q.deadRows(ctx, q.tables)
	if err != nil {
		return 0, err
	}
	vacuumed := 0
	for table, dead := range counts {
		if dead < q.floor[table] { // autovacuum removed more since
			q.floor[table] = dead
		}
		if dead-q.floor[table] < q.v.DeadRows {
			continue
		}
		if err := q.s.vacuum(ctx, table, q.v.Timeout); err != nil {
			return vacuumed, err
		}
		vacuumed++
		left, err := q.deadRows(ctx, []string{table})
		if err != nil {
			return vacuumed, err
		}
		q.floor[table] = left[table]
	}
	return vacuumed, nil
}

// deadRows counts the dead rows of each of tables.
func (q *queueVacuumer) deadRows(ctx context.Context, tables []string) (map[string]int64, error) {
	rows, _ := q.s.pool.Query(ctx, deadRowsSQL, tables)
	counts := make(map[string]int64, len(tables))
	var table string
	var dead int64
	_, err := pgx.ForEachRow(rows, []any{&table, &dead}, func() error {
		counts[table] = dead
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("counting dead rows: %w", interpret(err))
	}
	return counts, nil
}

// vacuum runs one VACUUM of table, bounded by timeout.
func (s *Store) vacuum(ctx context.Context, table string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// No arguments: pgx sends it by the simple protocol, outside any
	// transaction block, as VACUUM requires (also through a pooler).
	_, err := s.pool.Exec(ctx, "VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("vacuuming %s: took longer than %s", table, timeout)
		}
		return fmt.Errorf("vacuuming %s: %w", table, interpret(err))
	}
	return nil
}

// sleepCtx waits d, and reports false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
