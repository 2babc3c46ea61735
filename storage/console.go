package storage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.ConsoleStore = (*Store)(nil)

// ConsoleSessionInsert stores a new console session; expired sessions are
// removed along the way, a few at a time, so that the table stays small
// without a sweeper of its own.
func (s *Store) ConsoleSessionInsert(ctx context.Context, cs fulfillment.ConsoleSession) error {
	return s.withTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash IN (
			SELECT id_hash FROM console_sessions WHERE expires_at < now() LIMIT 100 FOR UPDATE SKIP LOCKED)`); err != nil {
			return fmt.Errorf("removing expired console sessions: %w", interpret(err))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO console_sessions (id_hash, token_name, token_print, csrf_token, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6)`,
			cs.IDHash, cs.TokenName, cs.TokenPrint, cs.CSRFToken, cs.CreatedAt, cs.ExpiresAt); err != nil {
			return fmt.Errorf("inserting console session: %w", interpret(err))
		}
		return nil
	})
}

// ConsoleSessionGet returns the unexpired session named by idHash.
func (s *Store) ConsoleSessionGet(ctx context.Context, idHash []byte) (fulfillment.ConsoleSession, error) {
	var cs fulfillment.ConsoleSession
	err := s.pool.QueryRow(ctx, `SELECT id_hash, token_name, token_print, csrf_token, created_at, expires_at
		FROM console_sessions WHERE id_hash = $1 AND expires_at > now()`, idHash).
		Scan(&cs.IDHash, &cs.TokenName, &cs.TokenPrint, &cs.CSRFToken, &cs.CreatedAt, &cs.ExpiresAt)
	if err != nil {
		return cs, fmt.Errorf("reading console session: %w", interpret(err))
	}
	return cs, nil
}

// ConsoleSessionDelete ends the session named by idHash.
func (s *Store) ConsoleSessionDelete(ctx context.Context, idHash []byte) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("deleting console session: %w", interpret(err))
	}
	return nil
}

// ConsoleAuditInsert records one console action.
func (s *Store) ConsoleAuditInsert(ctx context.Context, e fulfillment.ConsoleAuditEntry) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO console_audit (actor, action, target_kind, target_id, org_id, outcome, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		e.Actor, e.Action, e.TargetKind, e.TargetID, e.OrgID, e.Outcome, e.Detail); err != nil {
		return fmt.Errorf("recording console action: %w", interpret(err))
	}
	return nil
}

// ConsoleAuditList returns the audit entries f selects, newest first.
func (s *Store) ConsoleAuditList(ctx context.Context, f fulfillment.ConsoleAuditFilter) ([]fulfillment.ConsoleAuditEntry, error) {
	var w where
	if f.Orgs != nil {
		w.add("(org_id = ANY(" + w.arg(f.Orgs) + ") OR actor = " + w.arg(f.Actor) + ")")
	} else {
		w.eq("actor", f.Actor)
	}
	w.eq("action", f.Action)
	w.below("id", f.Before)
	limit := min(max(f.Limit, 1), 500)
	rows, err := s.pool.Query(ctx, `SELECT id, at, actor, action, target_kind, target_id, org_id, outcome, detail
		FROM console_audit`+w.sql()+` ORDER BY id DESC LIMIT `+w.arg(limit), w.args...)
	if err != nil {
		return nil, fmt.Errorf("listing console actions: %w", interpret(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.ConsoleAuditEntry, error) {
		var e fulfillment.ConsoleAuditEntry
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.TargetKind, &e.TargetID, &e.OrgID, &e.Outcome, &e.Detail)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing console actions: %w", interpret(err))
	}
	return out, nil
}
