package fulfillment

import (
	"context"
	"time"
)

// ConsoleSession is one operator's sign-in to the admin console. It names
// the configured API token the operator signed in with, never the token
// itself.
type ConsoleSession struct {
	// IDHash is the SHA-256 of the session id the cookie carries.
	IDHash []byte
	// TokenName is the name of the configured token (auth.tokens).
	TokenName string
	// TokenPrint is a one-way fingerprint of the token's value: a token
	// rotated under the same name no longer matches it.
	TokenPrint []byte
	// CSRFToken must accompany every state-changing request of the session.
	CSRFToken string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// ConsoleAuditEntry records one console action.
type ConsoleAuditEntry struct {
	ID int64
	At time.Time
	// Actor is the session's token name.
	Actor string
	// Action names what was done, e.g. "reconciliation.resolve".
	Action string
	// TargetKind and TargetID name what it was done to, e.g. "order" and
	// its id; OrgID is the target's org when known.
	TargetKind, TargetID, OrgID string
	// Outcome is "ok" or the refusal's gRPC code, e.g. "PermissionDenied".
	Outcome string
	// Detail is a short, secret-free note (a resolution, a reason).
	Detail string
}

// ConsoleAuditFilter selects audit entries, newest first.
type ConsoleAuditFilter struct {
	// Orgs limits the entries to these orgs, plus those of Actor; nil means
	// every entry.
	Orgs []string
	// Actor, when set, keeps only (or, with Orgs, adds) the actor's entries.
	Actor string
	// Action, when set, keeps only that action.
	Action string
	// Before is a cursor: entries with a smaller id (0: the newest).
	Before int64
	// Limit caps the entries returned.
	Limit int
}

// ConsoleStore keeps the console's sessions and its audit log.
type ConsoleStore interface {
	// ConsoleSessionInsert stores a new session.
	ConsoleSessionInsert(ctx context.Context, s ConsoleSession) error
	// ConsoleSessionGet returns the unexpired session with the id hash, or
	// ErrNotFound.
	ConsoleSessionGet(ctx context.Context, idHash []byte) (ConsoleSession, error)
	// ConsoleSessionDelete ends a session (signing out); ending one that
	// does not exist is no error.
	ConsoleSessionDelete(ctx context.Context, idHash []byte) error
	// ConsoleAuditInsert records an action.
	ConsoleAuditInsert(ctx context.Context, e ConsoleAuditEntry) error
	// ConsoleAuditList returns the entries f selects, newest first.
	ConsoleAuditList(ctx context.Context, f ConsoleAuditFilter) ([]ConsoleAuditEntry, error)
}
