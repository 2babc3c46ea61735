// Package fulfillment holds the domain of the fulfillment service: orders,
// their lines and expected settlement, the rules that validate them and the
// errors every layer speaks. It does no I/O: storage, transport and workers
// depend on it, never the reverse.
package fulfillment

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotFound means the requested object does not exist (or is not visible to
// the caller).
var ErrNotFound = errors.New("not found")

// Not found, as the store says it of what a caller named by its id, and as
// the API says it of one of an org the caller may not see: the two read
// alike, so that a caller cannot tell them apart.
var (
	ErrOrderNotFound        = fmt.Errorf("order %w", ErrNotFound)
	ErrSubscriptionNotFound = fmt.Errorf("subscription %w", ErrNotFound)
)

// NotFoundID is not found for the object of kind what ("stored event")
// and number id (see ErrOrderNotFound).
func NotFoundID(what string, id int64) error { return fmt.Errorf("%w: %s %d", ErrNotFound, what, id) }

// ErrConflict means an idempotency key was reused with different content: the
// existing object was left unchanged.
var ErrConflict = errors.New("conflict")

// ErrUnavailable means a dependency (the database) cannot be reached right
// now; the caller should retry.
var ErrUnavailable = errors.New("unavailable")

// ErrDatabaseDown marks an ErrUnavailable (an error wraps both) that says
// nothing of the call that met it: the database could not be reached,
// takes no writes (a standby), or lacks what a write needs (a disk full).
// Queued work that failed for it is tried again after its backoff without
// using one of its attempts, however long that lasts: an outage delays a
// payment, it never fails it. A call that ran out of time (a deadline, a
// statement timeout) or that PostgreSQL rolled back to break a deadlock is
// not one: the work itself may cause those, and its attempts bound them.
var ErrDatabaseDown = errors.New("database down")

// ErrConnectionLost marks an ErrDatabaseDown of a call whose connection
// ended under it (the server shut down, crashed, or ended the session): an
// outage, or the call's own doing (a query that crashes the server, or that
// an operator's watchdog ends). Queued work that failed for it is counted
// when other work of its queue succeeded meanwhile: the database was up.
var ErrConnectionLost = errors.New("connection lost")

// ReasonDatabaseUnavailable is the google.rpc.ErrorInfo reason of the
// UNAVAILABLE the API answers for ErrUnavailable: the service is up, its
// database does not answer, so a client need not look for the service.
const ReasonDatabaseUnavailable = "DATABASE_UNAVAILABLE"

// FieldViolation names one invalid field of a request and says why.
type FieldViolation struct {
	// Field is the request field path, e.g. "lines[0].quantity".
	Field string
	// Description says what is wrong in words a person can act on.
	Description string
}

// ValidationError is a request that breaks one or more input rules. Nothing
// was changed.
type ValidationError struct {
	Violations []FieldViolation
}

// Error lists the violations.
func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = fmt.Sprintf("%s: %s", v.Field, v.Description)
	}
	return "invalid argument: " + strings.Join(parts, "; ")
}

// violations collects field violations while a request is checked.
type violations []FieldViolation

func (vs *violations) add(field, format string, args ...any) {
	*vs = append(*vs, FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// err returns a *ValidationError, or nil when nothing was added.
func (vs violations) err() error {
	if len(vs) == 0 {
		return nil
	}
	return &ValidationError{Violations: vs}
}
