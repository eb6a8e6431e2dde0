package getorcreate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/racefree/racefree"
)

// MaxAttempts bounds the insert-then-select rounds of one Do.
const MaxAttempts = 5

var (
	// ErrVanished means the insert found a conflicting row MaxAttempts times
	// and the select found no row each time: the row is deleted as fast as
	// it is created, or the insert has no conflict target and its conflict
	// was on another unique constraint than the key the select looks up
	// (use an explicit conflict target).
	ErrVanished = errors.New("getorcreate: the insert conflicted but the select found no row")
	// ErrConflictTarget means the engine found no unique constraint or index
	// matching the insert's ON CONFLICT target. The target must repeat the
	// index's columns or expression exactly: ON CONFLICT (lower(email)) for
	// an index on lower(email), not ON CONFLICT (email).
	ErrConflictTarget = errors.New("getorcreate: ON CONFLICT target matches no unique index (an expression index needs the same expression)")
)

// ConflictError means the insert collided with an existing row on a unique
// index or constraint other than the conflict target, and no row has the
// key: another entity holds that unique value (another user already has
// the handle), so there is no row to get and none could be created. It
// matches racefree.ErrConflict, and wraps the driver's error.
type ConflictError struct {
	// Constraint names what the insert collided with, as the engine says
	// it: on PostgreSQL the constraint or index name ("users_handle"), on
	// SQLite the columns ("users.handle") or, for an expression index, the
	// index ("index 'users_handle'").
	Constraint string
	// Err is the driver's unique-violation error.
	Err error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("getorcreate: the row conflicts with another row on %s, and no row has the key", e.Constraint)
}

// Unwrap returns racefree.ErrConflict and the driver's error.
func (e *ConflictError) Unwrap() []error { return []error{racefree.ErrConflict, e.Err} }

// Query represents one get-or-create, in the caller's SQL and placeholders.
type Query struct {
	// Insert creates the row: INSERT … ON CONFLICT (<the key, as the unique
	// index spells it>) DO NOTHING RETURNING <columns>.
	Insert     string
	InsertArgs []any
	// Select reads the existing row by the same key: SELECT <the same
	// columns, in the same order> FROM … WHERE <key>.
	Select     string
	SelectArgs []any
}

var (
	spaces    = regexp.MustCompile(`\s+`)
	doNothing = regexp.MustCompile(`\bON CONFLICT\b[^;]*\bDO NOTHING\b[^;]*\bRETURNING\b`)
	doUpdate  = regexp.MustCompile(`\bDO UPDATE\b`)
	isSelect  = regexp.MustCompile(`^(SELECT|WITH)\b`)
)

func (q Query) validate() error {
	ins := strings.ToUpper(spaces.ReplaceAllString(strings.TrimSpace(q.Insert), " "))
	switch {
	case !strings.HasPrefix(ins, "INSERT ") && !strings.HasPrefix(ins, "WITH "):
		return racefree.Invalid("Insert", "must be an INSERT")
	case doUpdate.MatchString(ins):
		return racefree.Invalid("Insert", "must use ON CONFLICT … DO NOTHING: DO UPDATE makes it an upsert, which always returns a row")
	case !doNothing.MatchString(ins):
		return racefree.Invalid("Insert", "must end in ON CONFLICT (<key>) DO NOTHING RETURNING <columns>")
	}
	if sel := strings.ToUpper(strings.TrimSpace(q.Select)); !isSelect.MatchString(sel) {
		return racefree.Invalid("Select", "must be a SELECT")
	}
	return nil
}

// Do returns the row of q's key, creating it with q.Insert when it does not
// exist, and reports whether this call created it.
//
// scan reads the row: it is called with the insert's *sql.Row, and, when
// the insert returned no row because the key exists, with the select's.
// Both queries must therefore return the same columns in the same order.
// scan must return Row.Scan's error, wrapped or not: sql.ErrNoRows is how
// Do tells "exists" from "created". When Do returns an error, what scan
// wrote is meaningless.
//
// A unique violation on another index than the conflict target (ON
// CONFLICT absorbs only its target, on both engines) is answered the same
// way on both: Do selects by the key, and returns the row when one exists
// (a concurrent caller created the same entity, which collided on both
// indexes), or a *ConflictError naming the other index when none does
// (another entity holds that value). Inside a *sql.Tx, Do wraps the insert
// in a savepoint, so that on PostgreSQL the violation does not abort the
// caller's transaction.
//
// Do runs its statements on exec; pass the caller's *sql.Tx to make the
// creation part of the caller's transaction. The context governs every
// statement. See the package documentation for the failure modes.
func Do(ctx context.Context, exec racefree.Executor, q Query, scan func(row *sql.Row) error) (created bool, err error) {
	if err := q.validate(); err != nil {
		return false, err
	}
	for range MaxAttempts {
		var conflict *ConflictError
		err := insert(ctx, exec, q, scan)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, sql.ErrNoRows):
			// ON CONFLICT found the key: read the row.
		case targetMismatch(err):
			return false, fmt.Errorf("%w: %w", ErrConflictTarget, err)
		default:
			name, ok := uniqueViolation(err)
			if !ok {
				return false, fmt.Errorf("getorcreate: insert: %w", err)
			}
			// Another unique index refused the row: either a concurrent
			// caller's row for the same key (it collides on both), or
			// another entity's. The select tells which.
			conflict = &ConflictError{Constraint: name, Err: err}
		}
		// The key exists: read it. Between the two statements the row can
		// have been deleted; then create it again.
		err = scan(exec.QueryRowContext(ctx, q.Select, q.SelectArgs...))
		if err == nil {
			return false, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return false, fmt.Errorf("getorcreate: select: %w", err)
		}
		if conflict != nil {
			return false, conflict
		}
	}
	return false, fmt.Errorf("%w, %d times", ErrVanished, MaxAttempts)
}

// savepoint names the savepoint that keeps the caller's transaction usable
// after the insert fails.
const savepoint = "racefree_getorcreate"

// insert runs q.Insert and scans its row. Inside a *sql.Tx it runs under a
// savepoint, rolled back when the insert fails: PostgreSQL aborts the whole
// transaction on any error, which would make the select after a unique
// violation impossible.
func insert(ctx context.Context, exec racefree.Executor, q Query, scan func(row *sql.Row) error) error {
	tx, ok := exec.(*sql.Tx)
	if !ok {
		return scan(exec.QueryRowContext(ctx, q.Insert, q.InsertArgs...))
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT "+savepoint); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	err := scan(tx.QueryRowContext(ctx, q.Insert, q.InsertArgs...))
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); rerr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rerr))
		}
	}
	if _, rerr := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+savepoint); rerr != nil {
		return errors.Join(err, fmt.Errorf("release savepoint: %w", rerr))
	}
	return err
}

// targetMismatch recognises PostgreSQL's SQLSTATE 42P10 and SQLite's
// message for an ON CONFLICT target that matches no unique index, without
// linking either driver.
func targetMismatch(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		return st.SQLState() == "42P10"
	}
	return strings.Contains(err.Error(), "ON CONFLICT clause does not match any PRIMARY KEY or UNIQUE constraint")
}

// sqliteUnique matches SQLite's message for a UNIQUE or PRIMARY KEY
// violation; the group is what it names.
var sqliteUnique = regexp.MustCompile(`(?:UNIQUE|PRIMARY KEY) constraint failed: (.*?)(?: \(\d+\))?$`)

// uniqueViolation recognises a unique violation (PostgreSQL SQLSTATE
// 23505, SQLite SQLITE_CONSTRAINT_UNIQUE 2067 or _PRIMARYKEY 1555) without
// linking either driver, and returns the name of what was violated.
func uniqueViolation(err error) (string, bool) {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		if st.SQLState() != "23505" {
			return "", false
		}
		// pgconn.PgError carries the name in a field, not a method.
		if v := reflect.Indirect(reflect.ValueOf(st)); v.Kind() == reflect.Struct {
			if f := v.FieldByName("ConstraintName"); f.Kind() == reflect.String && f.String() != "" {
				return f.String(), true
			}
		}
		return "a unique constraint", true
	}
	var sc interface{ Code() int }
	if !errors.As(err, &sc) || (sc.Code() != 2067 && sc.Code() != 1555) {
		return "", false
	}
	if m := sqliteUnique.FindStringSubmatch(err.Error()); m != nil {
		return m[1], true
	}
	return "a unique constraint", true
}
