package racefree

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/racefree/racefree/internal/text"
)

// Sentinel errors. Callers test for them with errors.Is; the engines map
// driver errors onto them in one place each (Engine.InterpretError).
var (
	// ErrNotFound means the row the operation needs does not exist.
	ErrNotFound = errors.New("racefree: not found")
	// ErrConflict means a UNIQUE constraint rejected the write.
	ErrConflict = errors.New("racefree: unique constraint conflict")
	// ErrRetryable means the engine aborted the transaction because another
	// writer collided with it (SQLite busy or locked, PostgreSQL 40001 or
	// 40P01). InTx retries these itself; it returns one only when it ran out
	// of attempts.
	ErrRetryable = errors.New("racefree: transient conflict, retry")

	// ErrHeld means another holder's claim on the key is live.
	ErrHeld = errors.New("racefree: held by another holder")
	// ErrNotHeld means the caller does not hold the claim: it lapsed and was
	// taken over, was released, or never existed.
	ErrNotHeld = errors.New("racefree: not held")
	// ErrStaleFence means the caller's fencing token is older than the
	// current one: another holder took over after the caller's lease lapsed.
	ErrStaleFence = errors.New("racefree: stale fencing token")

	// ErrInProgress means an earlier request with the same idempotency key
	// is still being processed; retry later.
	ErrInProgress = errors.New("racefree: a request with this idempotency key is in progress")
	// ErrMismatch means an idempotency key was reused with a different
	// request (another fingerprint).
	ErrMismatch = errors.New("racefree: idempotency key reused with a different request")

	// ErrQuotaExceeded means a quota or rate limit refused a charge; the
	// concrete error is a *quota.ExceededError with the decision.
	ErrQuotaExceeded = errors.New("racefree: quota exceeded")

	// ErrSchemaOutdated means the database schema is older than this code
	// and the caller did not ask to migrate it.
	ErrSchemaOutdated = errors.New("racefree: database schema is older than this code")
	// ErrSchemaTooNew means the database schema was migrated by a newer
	// version of racefree than this one; this code refuses to run against it.
	ErrSchemaTooNew = errors.New("racefree: database schema is newer than this code")

	// ErrInvalidInput means an argument was rejected before anything was
	// written. The concrete error is an *InputError.
	ErrInvalidInput = errors.New("racefree: invalid input")
)

// InputError represents an argument that failed validation. Nothing was
// written when an operation returns one.
type InputError struct {
	Field  string // the argument or JSON field, e.g. "ttl"
	Reason string // what is wrong with it, e.g. "must be between 1ms and 720h"
}

func (e *InputError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

// Is reports ErrInvalidInput as matching.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

// Invalid returns an *InputError for field.
func Invalid(field, format string, args ...any) error {
	return &InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// SchemaError reports a schema version that does not match the code.
// It matches ErrSchemaOutdated or ErrSchemaTooNew.
type SchemaError struct {
	Have int64 // highest version applied to the database
	Want int64 // highest version this code knows
}

func (e *SchemaError) Error() string {
	if e.Have > e.Want {
		return fmt.Sprintf("database schema is at version %d, newer than this racefree (version %d): upgrade racefree", e.Have, e.Want)
	}
	return fmt.Sprintf("database schema is at version %d, this racefree needs version %d: run `racefree migrate up`", e.Have, e.Want)
}

// Is matches ErrSchemaTooNew or ErrSchemaOutdated.
func (e *SchemaError) Is(target error) bool {
	if e.Have > e.Want {
		return target == ErrSchemaTooNew
	}
	return target == ErrSchemaOutdated
}

// ErrUnavailable means the database could not be reached or refused the
// work for a reason outside the request: a connection that failed or was
// terminated, a server shutting down or starting up (PostgreSQL SQLSTATE
// classes 08 and 57), a full disk or a failed read, write or sync of the
// database's files (SQLite's SQLITE_FULL and SQLITE_IOERR). The outcome of a
// write that returns it is unknown: retry it with the same idempotency key,
// or re-read. HTTP answers it with 503 and Retry-After.
var ErrUnavailable = errors.New("racefree: database unavailable")

// ErrReadOnly means the database refused a write because the node it
// reached accepts no writes: a PostgreSQL hot standby (in recovery), or a
// session or database set read-only (SQLSTATE 25006
// read_only_sql_transaction). The statement that returns it wrote
// nothing. It also matches ErrUnavailable: retry, with the same
// idempotency key, once the primary is reachable. The concrete error is
// a *ReadOnlyError. HTTP answers it with 503 read-only and Retry-After.
var ErrReadOnly = errors.New("racefree: database is read-only")

// ReadOnlyError represents a write a read-only node refused. It matches
// ErrReadOnly and ErrUnavailable, and unwraps to the driver's error.
type ReadOnlyError struct {
	Reason string // why the node is read-only, e.g. "in recovery (a standby)"
	Err    error  // the driver's error; nil when a probe found the node read-only
}

func (e *ReadOnlyError) Error() string {
	msg := "racefree: database is read-only"
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrReadOnly and ErrUnavailable.
func (e *ReadOnlyError) Is(target error) bool {
	return target == ErrReadOnly || target == ErrUnavailable
}

// Unwrap returns the driver's error.
func (e *ReadOnlyError) Unwrap() error { return e.Err }

// ErrNotDurable means a write was refused because its commit would not
// be waited for by a synchronous standby, and racefree.Config
// RequireSynchronousReplication asks for one: synchronous_commit is local
// or off, synchronous_standby_names is empty, no synchronous standby
// streams, or the role cannot see whether one does. Nothing of the write
// committed. It also matches ErrUnavailable: retry, with the same
// idempotency key, once a synchronous standby is back. The concrete error
// is a *NotDurableError. HTTP answers it with 503 not-durable and
// Retry-After.
var ErrNotDurable = errors.New("racefree: a commit would not be durable on a synchronous standby")

// NotDurableError represents a write refused by
// Config.RequireSynchronousReplication. It matches ErrNotDurable and
// ErrUnavailable, and unwraps to the driver's error.
type NotDurableError struct {
	Reason string // why no standby would wait, e.g. "synchronous_standby_names is empty, …"
	Err    error  // the driver's error
}

func (e *NotDurableError) Error() string {
	return "racefree: write refused, its commit would not be durable: " + e.Reason
}

// Is matches ErrNotDurable and ErrUnavailable.
func (e *NotDurableError) Is(target error) bool {
	return target == ErrNotDurable || target == ErrUnavailable
}

// Unwrap returns the driver's error.
func (e *NotDurableError) Unwrap() error { return e.Err }

// CheckText validates a text argument of 1 to maxBytes bytes: valid UTF-8
// and no NUL byte. SQLite stores a NUL inside text and PostgreSQL rejects
// it, so both engines refuse it here, before either sees it. It returns an
// *InputError naming field.
func CheckText(field, value string, maxBytes int) error {
	switch {
	case len(value) == 0 || len(value) > maxBytes:
		return Invalid(field, "must be 1 to %d bytes, got %d", maxBytes, len(value))
	case !utf8.ValidString(value):
		return Invalid(field, "must be valid UTF-8")
	case text.HasNUL(value):
		return Invalid(field, "must not contain a NUL byte")
	}
	return nil
}
