package uniquecheck

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	_ "modernc.org/sqlite" // the read-only SQLite pool Open builds
)

// DefaultTimeout bounds a check when Checker.Timeout is zero.
const DefaultTimeout = 60 * time.Second

// ErrRowsHidden is the error of a check on PostgreSQL whose role
// row-level security binds on the table: a count of only the rows the
// policies show could say "no duplicates" where CREATE UNIQUE INDEX, which
// sees every row, fails. The check gives no verdict instead (the CLI exits
// 2); run it as a role that bypasses row-level security.
var ErrRowsHidden = errors.New("uniquecheck: row-level security hides rows from this role")

// DefaultLimit is how many groups a Report lists when Spec.Limit is zero.
const DefaultLimit = 20

// DefaultMaxKeys is how many primary keys a listed group carries when
// Spec.MaxKeys is zero.
const DefaultMaxKeys = 10

// Spec describes one unique index to check: the rows of Table for which
// Where holds, grouped by Keys, exactly as CREATE UNIQUE INDEX would see
// them.
type Spec struct {
	// Table is the table, as written in SQL: users, app.users, "Users".
	Table string
	// Keys are the index's key expressions, as written in the index:
	// column names (email) or expressions (lower(email)). At least one.
	Keys []string
	// Where is the predicate of a partial index (deleted_at IS NULL);
	// empty for a full index.
	Where string
	// NullsNotDistinct makes NULL key values equal to each other, as
	// UNIQUE NULLS NOT DISTINCT does (PostgreSQL 15 and later only).
	// Defaults to false: a row with a NULL in any key never conflicts.
	NullsNotDistinct bool
	// NotNull makes a NULL in any key a failure of its own, as the NOT
	// NULL that a PRIMARY KEY sets on its columns (or an added column's
	// NOT NULL) is: Report.NullRows counts the table's rows with one. It
	// counts every row, whatever Where says: NOT NULL is the column's,
	// not the index's.
	NotNull bool
	// Limit bounds the groups listed in Report.Groups (the totals always
	// cover every group). Defaults to DefaultLimit; negative lists all.
	Limit int
	// MaxKeys bounds the primary keys listed per group (Group.Count is
	// always the true count). Defaults to DefaultMaxKeys; negative lists
	// all.
	MaxKeys int

	// IndexName is the name the migration gives the index or constraint,
	// when known; Check then warns about an existing index of that name.
	IndexName string
	// IfNotExists records that the migration creates the index with
	// IF NOT EXISTS, which skips silently over an existing index.
	IfNotExists bool
	// Source says where the spec came from, e.g. "migration.sql:12".
	Source string
	// Notes are copied to Report.Warnings: what FromMigration found about
	// this index that the check of the current data cannot settle.
	Notes []string
}

// Report is the verdict on one Spec. The engine would build the index
// exactly when DuplicateGroups and NullRows are both zero ([Report.Builds]).
type Report struct {
	Source           string   `json:"source,omitempty"`
	Table            string   `json:"table"`
	Keys             []string `json:"keys"`
	Where            string   `json:"where"`
	NullsNotDistinct bool     `json:"nulls_not_distinct"`
	NotNull          bool     `json:"not_null"`
	Only             bool     `json:"only"`        // PostgreSQL: the index covers the table's own rows, not those of the tables that INHERITS from it, and the check read ONLY them
	NullRows         int64    `json:"null_rows"`   // with NotNull: the rows with a NULL in a key, on each of which NOT NULL fails
	PrimaryKey       []string `json:"primary_key"` // columns identifying a row in Groups; ["rowid"] or ["ctid"] when the table has none
	DuplicateGroups  int64    `json:"duplicate_groups"`
	SurplusRows      int64    `json:"surplus_rows"` // Σ(count − 1): the rows to remove for the index to build
	Groups           []Group  `json:"groups"`       // the largest groups first, up to Spec.Limit
	Warnings         []string `json:"warnings"`

	pkOrdered bool // a single-column primary key with min and max (named by the aggregate on PostgreSQL)
}

// Builds reports whether the index would build on the data checked: no
// duplicate group and, with Spec.NotNull, no row with a NULL key.
func (r *Report) Builds() bool { return r.DuplicateGroups == 0 && r.NullRows == 0 }

// Group is a set of rows that share one key.
type Group struct {
	Values      []*string         `json:"values"` // the key values as text, nil for NULL; see Report.Masked
	Count       int64             `json:"count"`
	PrimaryKeys []json.RawMessage `json:"primary_keys"` // one JSON value per row (an array for a composite key), ascending, the first Spec.MaxKeys of Count
}

// Checker runs checks on one database, reading only. It is safe for
// concurrent use.
type Checker struct {
	d     dialect
	db    *sql.DB
	owned bool
	// Timeout bounds each check, as a statement timeout on PostgreSQL and
	// a context deadline on both engines. Defaults to DefaultTimeout.
	Timeout time.Duration
}

// New returns a Checker on an existing pool of engine ([racefree.SQLite] or
// [racefree.Postgres]). It does no I/O. The caller keeps ownership of db.
func New(engine string, db *sql.DB) (*Checker, error) {
	d, err := dialectFor(engine)
	if err != nil {
		return nil, err
	}
	return &Checker{d: d, db: db}, nil
}

// Open opens the database named by dsnStr for checking only. It neither
// creates nor migrates anything: a SQLite file is opened read-only
// (mode=ro, query_only) and must exist; a PostgreSQL pool is opened
// without a connection until the first check.
func Open(dsnStr string) (*Checker, error) {
	engine, addr, err := dsn.Parse(dsnStr)
	if err != nil {
		return nil, err
	}
	if engine == racefree.Postgres {
		e, err := dsn.Engine(dsnStr)
		if err != nil {
			return nil, err
		}
		return &Checker{d: postgresDialect{}, db: e.SQL(), owned: true}, nil
	}
	if strings.ContainsAny(addr, "?#") {
		return nil, racefree.Invalid("dsn", "sqlite path %q must not contain ? or #", addr)
	}
	if st, err := os.Stat(addr); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("sqlite %s: no such database file", addr)
	}
	abs, err := filepath.Abs(addr)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "query_only(1)")
	q.Add("_pragma", "busy_timeout(10000)")
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String())
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", addr, err)
	}
	return &Checker{d: sqliteDialect{}, db: db, owned: true}, nil
}

// Engine returns [racefree.SQLite] or [racefree.Postgres].
func (c *Checker) Engine() string { return c.d.name() }

// Close closes the pool if Open made it.
func (c *Checker) Close() error {
	if c.owned {
		return c.db.Close()
	}
	return nil
}

// Check reports the duplicates that would make CREATE UNIQUE INDEX on spec
// fail. It runs in one read-only transaction (a consistent snapshot) bounded
// by c.Timeout, and never writes. Invalid names or expressions are an
// *racefree.InputError; an expression the engine rejects is returned as the
// engine's error.
func Check(ctx context.Context, db *racefree.DB, spec Spec) (*Report, error) {
	c, err := New(db.Engine(), db.SQL())
	if err != nil {
		return nil, err
	}
	return c.Check(ctx, spec)
}

// Check is the package-level Check on c's database.
func (c *Checker) Check(ctx context.Context, spec Spec) (*Report, error) {
	name, err := ParseName(spec.Table)
	if err != nil {
		return nil, err
	}
	table, err := name.Quoted()
	if err != nil {
		return nil, err
	}
	if len(spec.Keys) == 0 {
		return nil, racefree.Invalid("keys", "at least one key expression is needed")
	}
	for _, k := range spec.Keys {
		if err := checkExpr("key", k); err != nil {
			return nil, err
		}
	}
	if spec.Where != "" {
		if err := checkExpr("where", spec.Where); err != nil {
			return nil, err
		}
	}
	if err := c.d.refuse(spec); err != nil {
		return nil, err
	}
	limit := spec.Limit
	if limit == 0 {
		limit = DefaultLimit
	}
	maxKeys := spec.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	rep := &Report{
		Source: spec.Source, Table: name.String(), Keys: spec.Keys, Where: spec.Where,
		NullsNotDistinct: spec.NullsNotDistinct, NotNull: spec.NotNull, Groups: []Group{}, Warnings: append([]string{}, spec.Notes...),
	}
	err = c.d.readOnly(ctx, c.db, timeout, func(q querier) error {
		if err := c.preflight(ctx, q, name, spec, rep); err != nil {
			return err
		}
		rows, err := c.d.indexRows(ctx, q, name, table)
		if err != nil {
			return err
		}
		rep.Only = rows != table
		if err := c.scan(ctx, q, rows, spec, limit, maxKeys, rep); err != nil {
			return err
		}
		if spec.NotNull {
			// NOT NULL is set on the tables that inherit too.
			return countNulls(ctx, q, table, spec, rep)
		}
		return nil
	})
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("unique-check %s: timed out after %s: %w", rep.Table, timeout, err)
		}
		return nil, fmt.Errorf("unique-check %s: %w", rep.Table, err)
	}
	return rep, nil
}

// querier is what the read-only transaction offers: *sql.Tx or *sql.Conn.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}
