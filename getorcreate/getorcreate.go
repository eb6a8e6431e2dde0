package getorcreate

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/text"
	"github.com/racefree/racefree/internal/wire"
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
// matches [racefree.ErrConflict], and wraps the driver's error.
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

// Unwrap returns [racefree.ErrConflict] and the driver's error.
func (e *ConflictError) Unwrap() []error { return []error{racefree.ErrConflict, e.Err} }

// Query represents one get-or-create, in the caller's SQL and placeholders.
type Query struct {
	// Insert creates the row: INSERT … ON CONFLICT (<the key, as the unique
	// index spells it>) DO NOTHING RETURNING <columns>.
	Insert     string
	InsertArgs []any
	// Select reads the existing row by the same key: SELECT <the same
	// columns, in the same order> FROM … WHERE <key>. It runs whenever the
	// key exists, so it must change nothing: one that holds DELETE,
	// UPDATE (but FOR UPDATE), INSERT, MERGE or REPLACE INTO outside
	// quotes and comments, or a second statement, is an InputError.
	// Do judges it before it knows the engine, so it reads it as
	// PostgreSQL does (with standard_conforming_strings on and off) and
	// as SQLite does, and refuses it when any of them finds one: a text
	// both engines would read as one select that changes nothing passes.
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
	// SQLite stops reading a statement at a NUL and PostgreSQL refuses
	// it: refused here, both engines answer it alike.
	if text.HasNUL(q.Insert) {
		return racefree.Invalid("Insert", "must not contain a NUL byte")
	}
	if text.HasNUL(q.Select) {
		return racefree.Invalid("Select", "must not contain a NUL byte")
	}
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
	if w, as := changesData(q.Select); w != "" {
		return racefree.Invalid("Select", "must be a SELECT that changes nothing: as %s reads it, it holds %s outside quotes and comments (quote an identifier spelled like a keyword, pass a value as an argument)", as, w)
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
// On PostgreSQL with synchronous_standby_names set, a row that existed
// is returned only once the synchronous standby has it: Do locks it FOR
// KEY SHARE through q.Select, so that the COMMIT of the statement, or of
// the caller's *sql.Tx, waits for the standby (see the package
// documentation, "A row another transaction committed").
//
// Do runs its statements on exec; pass the caller's *sql.Tx to make the
// creation part of the caller's transaction. The context governs every
// statement: a ctx that ended before Do sent its insert returns the
// context's error, nothing done. On PostgreSQL outside a *sql.Tx (the
// pool, a *sql.DB or a *sql.Conn), where the insert commits by itself,
// an insert whose reply never came returns an error matching
// [racefree.ErrUnavailable]: a connection lost or terminated once it was
// sent, or a ctx that ended once it was sent (while it waits for another
// transaction's row of the same key, say; the error matches the
// context's error too). The server may have created the row: the
// outcome is unknown, not a failure, and Do again settles it, returning
// the row (created false then) or creating it. See the package
// documentation for the failure modes.
func Do(ctx context.Context, exec racefree.Executor, q Query, scan func(row *sql.Row) error) (created bool, err error) {
	if err := q.validate(); err != nil {
		return false, err
	}
	for range MaxAttempts {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("getorcreate: %w", err) // nothing sent
		}
		var conflict *ConflictError
		sqlite, err := insert(ctx, exec, q, scan)
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
				return false, fmt.Errorf("getorcreate: insert: %w", mayHaveCreated(exec, sqlite, err))
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
			if sqlite {
				return false, nil
			}
			return false, durable(ctx, exec, q)
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

// mayHaveCreated returns err, the insert's, as an unknown outcome (an
// error matching [racefree.ErrUnavailable] as well as err) when the
// insert ran by itself (outside a *sql.Tx, where it commits on its own)
// and its reply never came whole: the server may have committed it.
//
// Given the *racefree.DB, the engine judges, as for every statement of
// racefree's own that commits by itself ([wire.DB].InterpretAutocommit):
// on PostgreSQL a connection lost or terminated once the insert was
// sent, and a ctx that ended once it was sent (pgx then drops the
// connection and asks the server to cancel the statement, but the
// server may run and commit it first, once a row lock it waits for is
// free). A *sql.DB or *sql.Conn names no engine, and Do links no
// driver: on PostgreSQL it calls unknown what that engine calls
// unavailable ([wire.PostgresUnavailable], the rule it judges by too) and a
// ctx that ended. SQLite commits in the process and rolls back an
// interrupted statement, and a *sql.Tx never commits what failed: their
// errors stay as they are.
func mayHaveCreated(exec racefree.Executor, sqlite bool, err error) error {
	if _, inTx := exec.(*sql.Tx); inTx || errors.Is(err, racefree.ErrUnavailable) {
		return err
	}
	if db, ok := exec.(*racefree.DB); ok {
		return wire.Of(db).InterpretAutocommit(err)
	}
	if sqlite || !ended(err) && !wire.PostgresUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", racefree.ErrUnavailable, err)
}

// ended reports whether err is a context's end.
func ended(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// savepoint names the savepoint that keeps the caller's transaction usable
// after the insert fails.
const savepoint = "racefree_getorcreate"

// insert runs q.Insert and scans its row, and reports whether exec is a
// SQLite database (see onSQLite). Inside a *sql.Tx it runs under a
// savepoint, rolled back when the insert fails: PostgreSQL aborts the whole
// transaction on any error, which would make the select after a unique
// violation impossible.
func insert(ctx context.Context, exec racefree.Executor, q Query, scan func(row *sql.Row) error) (sqlite bool, err error) {
	tx, ok := exec.(*sql.Tx)
	if !ok {
		return onSQLite(exec, nil), scan(exec.QueryRowContext(ctx, q.Insert, q.InsertArgs...))
	}
	res, err := tx.ExecContext(ctx, "SAVEPOINT "+savepoint)
	if err != nil {
		return false, fmt.Errorf("savepoint: %w", err)
	}
	sqlite = onSQLite(tx, res)
	err = scan(tx.QueryRowContext(ctx, q.Insert, q.InsertArgs...))
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); rerr != nil {
			return sqlite, errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rerr))
		}
	}
	if _, rerr := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+savepoint); rerr != nil {
		return sqlite, errors.Join(err, fmt.Errorf("release savepoint: %w", rerr))
	}
	return sqlite, err
}

// onSQLite reports whether exec talks to SQLite rather than PostgreSQL,
// without linking either driver and without a round trip: a *racefree.DB
// says so; a *sql.DB or *sql.Conn by its driver's package (modernc.org/sqlite,
// mattn/go-sqlite3: "sqlite" in the path); a *sql.Tx, which names no
// driver, by res, the result of the SAVEPOINT insert ran in it: a SQLite
// driver returns the connection's last insert ID with every result, and
// PostgreSQL's drivers (pgx, lib/pq) have none to give.
func onSQLite(exec racefree.Executor, res sql.Result) bool {
	switch e := exec.(type) {
	case interface{ Engine() string }:
		return e.Engine() == racefree.SQLite
	case *sql.DB:
		return sqliteType(e.Driver())
	case *sql.Conn:
		var sqlite bool
		_ = e.Raw(func(dc any) error { sqlite = sqliteType(dc); return nil })
		return sqlite
	case *sql.Tx:
		if res == nil {
			return false
		}
		_, err := res.LastInsertId()
		return err == nil
	}
	return false
}

// sqliteType reports whether v's type comes from a package whose path
// names SQLite.
func sqliteType(v any) bool {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != nil && strings.Contains(strings.ToLower(t.PkgPath()), "sqlite")
}

// durableSQL is sql/postgres/durable.sql: q.Select stands at its marker.
//
//go:embed sql/postgres/durable.sql
var durableSQL string

// synchronousSQL is sql/postgres/synchronous.sql.
//
//go:embed sql/postgres/synchronous.sql
var synchronousSQL string

// selectMarker is where durable.sql takes the caller's select.
const selectMarker = "/* Query.Select */"

// durable makes the answer "exists" about the row q.Select reads commit
// only once a synchronous standby has the row, on PostgreSQL while
// synchronous_standby_names is set: durable.sql locks the rows q.Select
// reads FOR KEY SHARE, so that the statement's transaction (exec's, when
// it is a *sql.Tx) has an xid and WAL, and its COMMIT waits for the
// standby past the row's.
func durable(ctx context.Context, exec racefree.Executor, q Query) error {
	before, after, ok := strings.Cut(query.Embedded(durableSQL), selectMarker)
	if !ok {
		return errors.New("getorcreate: durable.sql has no " + selectMarker)
	}
	var synchronous bool
	if err := exec.QueryRowContext(ctx, query.Embedded(synchronousSQL)).Scan(&synchronous); err != nil {
		return fmt.Errorf("getorcreate: read synchronous_standby_names: %w", err)
	}
	if !synchronous {
		return nil
	}
	sel := strings.TrimSuffix(strings.TrimSpace(q.Select), ";")
	rows, err := exec.QueryContext(ctx, before+sel+after, q.SelectArgs...)
	if err != nil {
		return fmt.Errorf("getorcreate: lock the row for the synchronous standby (Select must be a query FOR KEY SHARE can lock: no aggregate, DISTINCT, GROUP BY, set operation or outer join): %w", err)
	}
	return rows.Close()
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
