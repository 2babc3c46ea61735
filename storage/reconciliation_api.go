package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// ReconGet implements fulfillment.ReconStore.
func (s *Store) ReconGet(ctx context.Context, id int64) (fulfillment.ReconItem, error) {
	it, err := scanReconItem(s.pool.QueryRow(ctx, "SELECT "+reconColumns+reconFrom+" WHERE r.id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return it, fulfillment.NotFoundID("reconciliation item", id)
	}
	if err != nil {
		return it, fmt.Errorf("reading reconciliation item: %w", interpret(err))
	}
	return it, nil
}

// resolvedBy is what a person's resolution sets on an item: the
// resolution ($2), their note ($3), who ($4: the token's name) and their
// detail ($5), and when.
const resolvedBy = `state = 'resolved', resolution = $2, resolution_note = $3,
	resolved_by = $4, resolved_by_detail = $5, resolved_at = now()`

// ReconResolve implements fulfillment.ReconStore. One statement: the
// update applies to an open item only, so two people resolving at once
// cannot both succeed; the loser reads who won.
func (s *Store) ReconResolve(ctx context.Context, r fulfillment.ReconResolve) (fulfillment.ReconItem, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE reconciliation_items SET `+resolvedBy+`
		WHERE id = $1 AND state = 'open'`, r.ID, r.Resolution, r.Note, r.Actor, opt(r.ActorDetail))
	if err != nil {
		return fulfillment.ReconItem{}, fmt.Errorf("resolving reconciliation item: %w", interpret(err))
	}
	it, err := s.ReconGet(ctx, r.ID)
	if err != nil {
		return it, err
	}
	if tag.RowsAffected() == 0 {
		return it, fulfillment.AlreadyResolved(it)
	}
	return it, nil
}

// ReconSummary implements fulfillment.ReconStore. Each count reads a
// partial index of what is open, pending, failed or stuck (migration 013),
// never the history: one round trip of four grouped counts.
func (s *Store) ReconSummary(ctx context.Context, f fulfillment.ReconFilter) ([]fulfillment.ReconSummaryRow, error) {
	type key struct {
		org string
		env fulfillment.Environment
	}
	rowsBy := map[key]*fulfillment.ReconSummaryRow{}
	var order []key
	row := func(org string, env fulfillment.Environment) *fulfillment.ReconSummaryRow {
		k := key{org, env}
		r, ok := rowsBy[k]
		if !ok {
			r = &fulfillment.ReconSummaryRow{OrgID: org, Environment: env, OpenByKind: map[fulfillment.ReconKind]int64{}}
			rowsBy[k] = r
			order = append(order, k)
		}
		return r
	}
	scope := func(alias string) (string, []any) {
		var w where
		w.among(alias+".org_id", f.VisibleOrgs)
		w.eq(alias+".org_id", f.OrgID)
		w.eq(alias+".environment", string(f.Environment))
		cond := ""
		for _, c := range w.conds {
			cond += " AND " + c
		}
		return cond, w.args
	}
	b := &pgx.Batch{}
	cond, args := scope("r")
	b.Queue(`SELECT r.org_id, r.environment, r.kind, count(*), min(r.created_at)
		FROM reconciliation_items r WHERE r.state = 'open'`+cond+` GROUP BY 1, 2, 3`, args...).
		Query(func(rows pgx.Rows) error {
			return forEachRow(rows, func(r pgx.Rows) error {
				var (
					org    string
					env    fulfillment.Environment
					kind   fulfillment.ReconKind
					n      int64
					oldest time.Time
				)
				if err := r.Scan(&org, &env, &kind, &n, &oldest); err != nil {
					return err
				}
				sr := row(org, env)
				sr.OpenByKind[kind] = n
				if sr.OldestOpen == nil || oldest.Before(*sr.OldestOpen) {
					sr.OldestOpen = &oldest
				}
				return nil
			})
		})
	// counts queues a query of rows (org_id, environment, n…) over the
	// table aliased alias, and hands each row's counts to set.
	counts := func(alias, query string, set func(sr *fulfillment.ReconSummaryRow, n []int64)) {
		cond, args := scope(alias)
		b.Queue(query+cond+` GROUP BY 1, 2`, args...).Query(func(rows pgx.Rows) error {
			return forEachRow(rows, func(r pgx.Rows) error {
				var (
					org string
					env fulfillment.Environment
				)
				n := make([]int64, len(r.FieldDescriptions())-2)
				dest := []any{&org, &env}
				for i := range n {
					dest = append(dest, &n[i])
				}
				if err := r.Scan(dest...); err != nil {
					return err
				}
				set(row(org, env), n)
				return nil
			})
		})
	}
	// Pending and failed events are counted apart, each through the rows
	// that hold them (the inbox's work rows, the unresolved events): one scan for both states would read every event of
	// the org (the org leads the event key), a million rows with a
	// million-event history. The inner conditions are the outer ones (the
	// same arguments, in the same order).
	inner, _ := scope("e")
	counts("x", `SELECT x.org_id, x.environment, sum(x.pending)::bigint, sum(x.failed)::bigint FROM (
			SELECT e.org_id, e.environment, count(*) AS pending, 0::bigint AS failed
			FROM inbox_work w JOIN inbox_events e USING (id) WHERE w.state = 'pending'`+inner+` GROUP BY 1, 2
			UNION ALL
			SELECT e.org_id, e.environment, 0, count(*)
			FROM inbox_unresolved e WHERE e.state = 'failed'`+inner+` GROUP BY 1, 2
		) x WHERE true`,
		func(sr *fulfillment.ReconSummaryRow, n []int64) { sr.EventsPending, sr.EventsFailed = n[0], n[1] })
	counts("o", `SELECT o.org_id, o.environment, count(*) FROM orders_unsettled o WHERE true`,
		func(sr *fulfillment.ReconSummaryRow, n []int64) { sr.PaidNotFulfilled = n[0] })
	counts("m", `SELECT m.org_id, m.environment, count(*) FILTER (WHERE m.state = 'failed'), count(*) FILTER (WHERE m.state = 'uncertain')
		FROM outbox_stuck m WHERE true`,
		func(sr *fulfillment.ReconSummaryRow, n []int64) { sr.OutboxFailed, sr.OutboxUncertain = n[0], n[1] })
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("summarizing reconciliation: %w", interpret(err))
	}
	out := make([]fulfillment.ReconSummaryRow, 0, len(order))
	for _, k := range order {
		out = append(out, *rowsBy[k])
	}
	slices.SortFunc(out, func(a, b fulfillment.ReconSummaryRow) int {
		return cmp.Or(cmp.Compare(a.OrgID, b.OrgID), cmp.Compare(a.Environment, b.Environment))
	})
	return out, nil
}

// ReconActivity implements fulfillment.ReconStore: one statement, each
// count found by its table's time index (migration 019).
func (s *Store) ReconActivity(ctx context.Context, f fulfillment.ReconFilter, since time.Time) ([]fulfillment.ActivityCount, error) {
	const scope = `($2::text[] IS NULL OR %[1]s.org_id = ANY ($2)) AND ($3 = '' OR %[1]s.org_id = $3) AND ($4 = '' OR %[1]s.environment = $4)`
	rows, _ := s.pool.Query(ctx, `
		SELECT 'events_received', date_trunc('minute', e.received_at), count(*) FROM inbox_events e
		WHERE e.received_at >= $1 AND `+fmt.Sprintf(scope, "e")+` GROUP BY 2
		UNION ALL
		SELECT 'orders_fulfilled', date_trunc('minute', o.created_at), count(*) FROM order_events o
		WHERE o.created_at >= $1 AND o.topic = 'order.fulfilled' AND `+fmt.Sprintf(scope, "o")+` GROUP BY 2
		UNION ALL
		SELECT 'messages_delivered', date_trunc('minute', a.finished_at), count(*)
		FROM outbox_attempts a JOIN outbox_messages m ON m.id = a.message_id
		WHERE a.finished_at >= $1 AND a.outcome = 'delivered' AND `+fmt.Sprintf(scope, "m")+` GROUP BY 2`,
		since, f.VisibleOrgs, f.OrgID, string(f.Environment))
	counts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.ActivityCount, error) {
		var c fulfillment.ActivityCount
		err := r.Scan(&c.Kind, &c.Minute, &c.N)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("counting activity: %w", interpret(err))
	}
	return counts, nil
}
