package getorcreate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/racefree/racefree"
)

// MaxAttempts bounds the insert-then-select rounds of one Do.
const MaxAttempts = 5

var (
	// ErrVanished means the insert found a conflicting row MaxAttempts times
	// and the select found no row each time: the row is deleted as fast as
	// it is created, or the insert's conflict was on another unique
	// constraint than the key the select looks up (use an explicit conflict
	// target).
	ErrVanished = errors.New("getorcreate: the insert conflicted but the select found no row")
	// ErrConflictTarget means the engine found no unique constraint or index
	// matching the insert's ON CONFLICT target. The target must repeat the
	// index's columns or expression exactly: ON CONFLICT (lower(email)) for
	// an index on lower(email), not ON CONFLICT (email).
	ErrConflictTarget = errors.New("getorcreate: ON CONFLICT target matches no unique index (an expression index needs the same expression)")
)

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
// Do runs its statements on exec; pass the caller's *sql.Tx to make the
// creation part of the caller's transaction. The context governs every
// statement. See the package documentation for the failure modes.
func Do(ctx context.Context, exec racefree.Executor, q Query, scan func(row *sql.Row) error) (created bool, err error) {
	if err := q.validate(); err != nil {
		return false, err
	}
	for range MaxAttempts {
		err := scan(exec.QueryRowContext(ctx, q.Insert, q.InsertArgs...))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			if targetMismatch(err) {
				return false, fmt.Errorf("%w: %w", ErrConflictTarget, err)
			}
			return false, fmt.Errorf("getorcreate: insert: %w", err)
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
	}
	return false, fmt.Errorf("%w, %d times", ErrVanished, MaxAttempts)
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
