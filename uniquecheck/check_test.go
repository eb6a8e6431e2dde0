package uniquecheck_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/uniquecheck"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a table, its rows, and the index to check on it.
type fixture struct {
	name       string
	engine     string   // empty for both engines
	table      string   // CREATE TABLE
	ddl        []string // run after table, before rows: CREATE INDEX …
	rows       []string
	spec       uniquecheck.Spec
	wantGroups int64
	wantSurp   int64
}

func fixtures() []fixture {
	const users = `CREATE TABLE users (id INTEGER PRIMARY KEY, org INTEGER, email TEXT, deleted_at BIGINT)`
	f := []fixture{
		{
			name: "case variants under lower()", table: users,
			rows: []string{`(1, 1, 'Ann@x.io', NULL)`, `(2, 1, 'ann@x.io', NULL)`, `(3, 1, 'ANN@X.IO', NULL)`, `(4, 1, 'bob@x.io', NULL)`, `(5, 1, 'Bob@x.io', NULL)`, `(6, 1, 'cy@x.io', NULL)`},
			spec: uniquecheck.Spec{Table: "users", Keys: []string{"lower(email)"}}, wantGroups: 2, wantSurp: 3,
		},
		{
			name: "case variants on the bare column", table: users,
			rows: []string{`(1, 1, 'Ann@x.io', NULL)`, `(2, 1, 'ann@x.io', NULL)`, `(3, 1, 'ANN@X.IO', NULL)`},
			spec: uniquecheck.Spec{Table: "users", Keys: []string{"email"}}, wantGroups: 0, wantSurp: 0,
		},
		{
			name: "NULLs are distinct", table: users,
			rows: []string{`(1, 1, NULL, NULL)`, `(2, 1, NULL, NULL)`, `(3, 1, NULL, NULL)`, `(4, 1, 'a', NULL)`},
			spec: uniquecheck.Spec{Table: "users", Keys: []string{"email"}}, wantGroups: 0, wantSurp: 0,
		},
		{
			name: "NULLs and real duplicates", table: users,
			rows: []string{`(1, 1, NULL, NULL)`, `(2, 1, NULL, NULL)`, `(3, 1, 'a', NULL)`, `(4, 2, 'a', NULL)`},
			spec: uniquecheck.Spec{Table: "users", Keys: []string{"lower(email)"}}, wantGroups: 1, wantSurp: 1,
		},
		{
			name: "soft-deleted rows under a partial index", table: users,
			rows: []string{`(1, 1, 'a', 100)`, `(2, 1, 'a', NULL)`, `(3, 1, 'a', 200)`, `(4, 1, 'b', 300)`, `(5, 1, 'b', 400)`},
			spec: uniquecheck.Spec{Table: "users", Keys: []string{"email"}, Where: "deleted_at IS NULL"}, wantGroups: 0, wantSurp: 0,
		},
		{
			name: "live duplicates under a partial index", table: users,
			rows: []string{`(1, 1, 'a', 100)`, `(2, 1, 'A', NULL)`, `(3, 1, 'a', NULL)`, `(4, 1, 'b', 300)`},
			spec: uniquecheck.Spec{Table: "users", Keys: []string{"lower(email)"}, Where: "deleted_at IS NULL"}, wantGroups: 1, wantSurp: 1,
		},
		{
			name: "soft-deleted rows under a full index", table: users,
			rows: []string{`(1, 1, 'a', 100)`, `(2, 1, 'a', NULL)`},
			spec: uniquecheck.Spec{Table: "users", Keys: []string{"email"}}, wantGroups: 1, wantSurp: 1,
		},
		{
			name: "composite key", table: users,
			rows: []string{`(1, 1, 'a', NULL)`, `(2, 1, 'a', NULL)`, `(3, 2, 'a', NULL)`, `(4, 1, NULL, NULL)`, `(5, 1, NULL, NULL)`, `(6, NULL, 'a', NULL)`, `(7, NULL, 'a', NULL)`, `(8, 1, 'a', NULL)`},
			spec: uniquecheck.Spec{Table: "users", Keys: []string{"org", "lower(email)"}}, wantGroups: 1, wantSurp: 2,
		},
		{
			name: "composite primary key", table: `CREATE TABLE memberships (org INTEGER, id INTEGER, email TEXT, PRIMARY KEY (org, id))`,
			rows: []string{`(1, 1, 'a')`, `(1, 2, 'A')`, `(2, 1, 'a')`, `(2, 2, 'b')`},
			spec: uniquecheck.Spec{Table: "memberships", Keys: []string{"lower(email)"}}, wantGroups: 1, wantSurp: 2,
		},
		{
			name: "no primary key", table: `CREATE TABLE events (source TEXT, ext_id TEXT)`,
			rows: []string{`('stripe', 'evt_1')`, `('stripe', 'evt_1')`, `('paypal', 'evt_1')`},
			spec: uniquecheck.Spec{Table: "events", Keys: []string{"source", "ext_id"}}, wantGroups: 1, wantSurp: 1,
		},
		{
			name: "SQLite keeps 1 and '1' apart in an untyped column", engine: racefree.SQLite,
			table: `CREATE TABLE loose (id INTEGER PRIMARY KEY, v)`,
			rows:  []string{`(1, 1)`, `(2, '1')`, `(3, 1.0)`, `(4, x'31')`},
			spec:  uniquecheck.Spec{Table: "loose", Keys: []string{"v"}}, wantGroups: 1, wantSurp: 1,
		},
		{
			name: "SQLite folds 1 and '1' in a TEXT column", engine: racefree.SQLite,
			table: `CREATE TABLE typed (id INTEGER PRIMARY KEY, v TEXT)`,
			rows:  []string{`(1, 1)`, `(2, '1')`, `(3, 1.0)`},
			spec:  uniquecheck.Spec{Table: "typed", Keys: []string{"v"}}, wantGroups: 1, wantSurp: 1,
		},
		{
			name: "SQLite column collation NOCASE", engine: racefree.SQLite,
			table: `CREATE TABLE nocase (id INTEGER PRIMARY KEY, v TEXT COLLATE NOCASE)`,
			rows:  []string{`(1, 'a')`, `(2, 'A')`, `(3, 'b')`},
			spec:  uniquecheck.Spec{Table: "nocase", Keys: []string{"v"}}, wantGroups: 1, wantSurp: 1,
		},
		{
			// An expression key the engine groups by sorting: SQLite computes
			// it once per row in a subquery, whose column keeps the collation.
			name: "SQLite expression key with a collation", engine: racefree.SQLite,
			table: `CREATE TABLE coll (id INTEGER PRIMARY KEY, v TEXT)`,
			rows:  []string{`(1, 'a')`, `(2, 'A')`, `(3, 'b')`, `(4, NULL)`, `(5, NULL)`, `(6, 'B')`, `(7, 'c')`},
			spec:  uniquecheck.Spec{Table: "coll", Keys: []string{"v COLLATE NOCASE"}}, wantGroups: 2, wantSurp: 2,
		},
		{
			// 1, '1' and x'31' concatenate to '1'; 1.0 to '1.0'.
			name: "SQLite expression key over an untyped column", engine: racefree.SQLite,
			table: `CREATE TABLE loose2 (id INTEGER PRIMARY KEY, v)`,
			rows:  []string{`(1, 1)`, `(2, '1')`, `(3, 1.0)`, `(4, x'31')`, `(5, NULL)`, `(6, NULL)`},
			spec:  uniquecheck.Spec{Table: "loose2", Keys: []string{"v || ''"}}, wantGroups: 1, wantSurp: 2,
		},
		{
			// An index on the key expression gives the groups in order: the
			// check keeps the plain aggregate, which reads the index, and
			// fetches the listed groups through it.
			name: "expression key with an index on it", table: users,
			ddl:  []string{`CREATE INDEX users_lower_email ON users (lower(email))`},
			rows: []string{`(1, 1, 'Ann@x.io', NULL)`, `(2, 1, 'ann@x.io', NULL)`, `(3, 1, 'ANN@X.IO', 5)`, `(4, 1, NULL, NULL)`, `(5, 1, NULL, NULL)`, `(6, 1, 'bob@x.io', NULL)`, `(7, 1, 'Bob@x.io', NULL)`, `(8, 1, 'cy@x.io', NULL)`},
			spec: uniquecheck.Spec{Table: "users", Keys: []string{"lower(email)"}, Where: "deleted_at IS NULL"}, wantGroups: 2, wantSurp: 2,
		},
		{
			name: "PostgreSQL NULLS NOT DISTINCT", engine: racefree.Postgres, table: users,
			rows: []string{`(1, 1, NULL, NULL)`, `(2, 1, NULL, NULL)`, `(3, 2, NULL, NULL)`, `(4, 1, 'a', NULL)`},
			spec: uniquecheck.Spec{Table: "users", Keys: []string{"org", "email"}, NullsNotDistinct: true}, wantGroups: 1, wantSurp: 1,
		},
		{
			name: "PostgreSQL mixed-case quoted table", engine: racefree.Postgres,
			table: `CREATE TABLE "Accounts" (id INTEGER PRIMARY KEY, email TEXT)`,
			rows:  []string{`(1, 'a')`, `(2, 'a')`},
			spec:  uniquecheck.Spec{Table: `"Accounts"`, Keys: []string{"email"}}, wantGroups: 1, wantSurp: 1,
		},
	}
	// A random table: many small groups, case variants, NULLs, soft deletes.
	r := rand.New(rand.NewPCG(1, 2))
	names := []string{"ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal"}
	var rows []string
	for i := 1; i <= 300; i++ {
		email := "NULL"
		if r.IntN(6) > 0 {
			n := names[r.IntN(len(names))] + fmt.Sprint(r.IntN(20))
			if r.IntN(2) == 0 {
				n = strings.ToUpper(n[:1]) + n[1:]
			}
			email = "'" + n + "@x.io'"
		}
		org, del := "NULL", "NULL"
		if r.IntN(8) > 0 {
			org = fmt.Sprint(r.IntN(3))
		}
		if r.IntN(3) == 0 {
			del = fmt.Sprint(r.IntN(1000))
		}
		rows = append(rows, fmt.Sprintf("(%d, %s, %s, %s)", i, org, email, del))
	}
	for _, s := range []uniquecheck.Spec{
		{Keys: []string{"email"}},
		{Keys: []string{"lower(email)"}},
		{Keys: []string{"lower(email)"}, Where: "deleted_at IS NULL"},
		{Keys: []string{"org", "lower(email)"}, Where: "deleted_at IS NULL"},
		{Keys: []string{"org", "email"}},
	} {
		s.Table = "users"
		f = append(f, fixture{name: fmt.Sprintf("random %v where %q", s.Keys, s.Where), table: users, rows: rows, spec: s, wantGroups: -1})
	}
	return f
}

// indexDDL is the CREATE UNIQUE INDEX that spec describes.
func indexDDL(spec uniquecheck.Spec) string {
	keys := make([]string, len(spec.Keys))
	for i, k := range spec.Keys {
		keys[i] = "(" + k + ")"
	}
	ddl := "CREATE UNIQUE INDEX uc_probe ON " + spec.Table + " (" + strings.Join(keys, ", ") + ")"
	if spec.NullsNotDistinct {
		ddl += " NULLS NOT DISTINCT"
	}
	if spec.Where != "" {
		ddl += " WHERE " + spec.Where
	}
	return ddl
}

// engineBuilds reports whether the engine builds the index, in a
// transaction that is rolled back.
func engineBuilds(t *testing.T, db *sql.DB, spec uniquecheck.Spec) bool {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, indexDDL(spec))
	if err != nil && !strings.Contains(strings.ToLower(err.Error()), "unique") && !strings.Contains(err.Error(), "23505") {
		t.Fatalf("%s: not a uniqueness failure: %v", indexDDL(spec), err)
	}
	return err == nil
}

// TestVerdictMatchesEngine is the proof: for every fixture, the check finds
// duplicates exactly when the engine refuses to build the index, and the
// engine builds it once the reported surplus rows are deleted.
func TestVerdictMatchesEngine(t *testing.T) {
	t.Parallel()
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			testdb.EachDSN(t, func(t *testing.T, dsnStr string) {
				db := testdb.Open(t, dsnStr, nil)
				if f.engine != "" && f.engine != db.Engine() {
					t.Skipf("%s only", f.engine)
				}
				ctx := context.Background()
				exec(t, db.SQL(), f.table)
				testdb.ExecAll(t, db.SQL(), f.ddl...)
				name := strings.Fields(f.table)[2]
				exec(t, db.SQL(), "INSERT INTO "+name+" VALUES "+strings.Join(f.rows, ", "))

				spec := f.spec
				spec.Limit, spec.MaxKeys = -1, -1
				rep, err := uniquecheck.Check(ctx, db, spec)
				if err != nil {
					t.Fatal(err)
				}
				if f.wantGroups >= 0 {
					if got, want := rep.DuplicateGroups, f.wantGroups; got != want {
						t.Errorf("duplicate groups = %d, want %d", got, want)
					}
					if got, want := rep.SurplusRows, f.wantSurp; got != want {
						t.Errorf("surplus rows = %d, want %d", got, want)
					}
				}
				if got, want := rep.DuplicateGroups > 0, !engineBuilds(t, db.SQL(), spec); got != want {
					t.Fatalf("check says duplicates=%v, engine says the index fails=%v (%s)", got, want, indexDDL(spec))
				}
				var sum int64
				for _, g := range rep.Groups {
					sum += g.Count - 1
					if int64(len(g.PrimaryKeys)) != g.Count {
						t.Fatalf("group %v: %d primary keys for %d rows", g.Values, len(g.PrimaryKeys), g.Count)
					}
				}
				if got, want := int64(len(rep.Groups)), rep.DuplicateGroups; got != want {
					t.Fatalf("listed %d groups with no limit, want %d", got, want)
				}
				if sum != rep.SurplusRows {
					t.Fatalf("Σ(count−1) over groups = %d, SurplusRows = %d", sum, rep.SurplusRows)
				}
				deleteSurplus(t, db, name, rep)
				if !engineBuilds(t, db.SQL(), spec) {
					t.Fatalf("index still fails after deleting the %d reported surplus rows", rep.SurplusRows)
				}
				again, err := uniquecheck.Check(ctx, db, spec)
				if err != nil {
					t.Fatal(err)
				}
				if again.DuplicateGroups != 0 || again.SurplusRows != 0 {
					t.Fatalf("after cleanup: %d groups, %d surplus", again.DuplicateGroups, again.SurplusRows)
				}
			})
		})
	}
}

// deleteSurplus deletes every row of every group but the first.
func deleteSurplus(t *testing.T, db *racefree.DB, table string, rep *uniquecheck.Report) {
	t.Helper()
	cond := make([]string, len(rep.PrimaryKey))
	for i, c := range rep.PrimaryKey {
		cond[i] = c + " = ?"
		if db.Engine() == racefree.Postgres {
			cond[i] = fmt.Sprintf("%s = $%d", c, i+1)
			if c == "ctid" {
				cond[i] = fmt.Sprintf("ctid = $%d::tid", i+1)
			}
		}
	}
	del := "DELETE FROM " + table + " WHERE " + strings.Join(cond, " AND ")
	for _, g := range rep.Groups {
		for _, raw := range g.PrimaryKeys[1:] {
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatal(err)
			}
			args, ok := v.([]any)
			if !ok {
				args = []any{v}
			}
			res, err := db.ExecContext(context.Background(), del, args...)
			if err != nil {
				t.Fatalf("%s %v: %v", del, args, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("%s %v: deleted %d rows, want 1", del, args, n)
			}
		}
	}
}

func exec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func TestBadInputIsRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		ctx := context.Background()
		for _, s := range []uniquecheck.Spec{
			{Table: "users"},
			{Table: "users; DROP TABLE users", Keys: []string{"email"}},
			{Table: `a.b.c`, Keys: []string{"email"}},
			{Table: "nope", Keys: []string{"email"}},
			{Table: "users", Keys: []string{"email); DROP TABLE users; --"}},
			{Table: "users", Keys: []string{"email /* x"}},
			{Table: "users", Keys: []string{"email"}, Where: "1=1; DELETE FROM users"},
		} {
			if _, err := uniquecheck.Check(ctx, db, s); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%+v: got %v, want ErrInvalidInput", s, err)
			}
		}
		for _, s := range []uniquecheck.Spec{
			{Table: "users", Keys: []string{"no_such_column"}},
			{Table: "users", Keys: []string{"email FROM users"}},
			{Table: "users", Keys: []string{"email"}, Where: "no_such_column IS NULL"},
		} {
			if _, err := uniquecheck.Check(ctx, db, s); err == nil {
				t.Errorf("%+v: got no error", s)
			}
		}
		// Nothing was written: the table is still there and empty.
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("users: %d rows, %v", n, err)
		}
	})
}

// TestExpressionsCannotWrite proves the transaction is read-only: a key
// expression that would write is refused by the engine.
func TestExpressionsCannotWrite(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'a')`)
		if db.Engine() == racefree.Postgres {
			exec(t, db.SQL(), `CREATE FUNCTION wipe() RETURNS int LANGUAGE sql AS 'DELETE FROM users RETURNING 1'`)
			if _, err := uniquecheck.Check(ctx, db, uniquecheck.Spec{Table: "users", Keys: []string{"wipe()"}}); err == nil || !strings.Contains(err.Error(), "read-only") {
				t.Fatalf("got %v, want a read-only transaction error", err)
			}
		} else {
			// SQLite has no writing functions in SQL; prove query_only is on.
			rep, err := uniquecheck.Check(ctx, db, uniquecheck.Spec{Table: "users", Keys: []string{"(SELECT query_only FROM pragma_query_only)"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Groups) != 1 || *rep.Groups[0].Values[0] != "1" {
				t.Fatalf("query_only inside the check: %+v", rep.Groups)
			}
			var q int
			if err := db.QueryRowContext(ctx, `PRAGMA query_only`).Scan(&q); err != nil || q != 0 {
				t.Fatalf("the pool's connections were left query_only=%d (%v)", q, err)
			}
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil || n != 2 {
			t.Fatalf("users: %d rows, %v", n, err)
		}
	})
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
		exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'a')`)
		c, err := uniquecheck.New(db.Engine(), db.SQL())
		if err != nil {
			t.Fatal(err)
		}
		c.Timeout = 200 * time.Millisecond
		slow := "(SELECT count(*) FROM users a, users b, users c, users d, users e, users f, users g, users h, users i, users j, users k, users l, users m, users n, users o, users p, users q, users r, users s, users t, users u, users v, users w, users x, users y, users z, users aa, users ab, users ac, users ad, users ae, users af)"
		// The caller's own deadline, far beyond the check's, ends a check
		// that ignores its timeout within seconds rather than never.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err = c.Check(ctx, uniquecheck.Spec{Table: "users", Keys: []string{slow}})
		if err == nil || !strings.Contains(err.Error(), "timed out after 200ms") {
			t.Fatalf("err = %v, want a time-out after 200ms", err)
		}
		if d := time.Since(start); d > 4*time.Second || ctx.Err() != nil {
			t.Fatalf("the timeout of 200ms took %s", d)
		}
	})
}

func TestNullsNotDistinctOnSQLite(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
	_, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, NullsNotDistinct: true})
	if !errors.Is(err, racefree.ErrInvalidInput) {
		t.Fatalf("got %v, want ErrInvalidInput", err)
	}
}

// TestInvalidIndexWarning leaves an INVALID index behind with a failed
// CREATE UNIQUE INDEX CONCURRENTLY, as a real deploy would, and expects the
// check of the same index to say so.
func TestInvalidIndexWarning(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	exec(t, db.SQL(), `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`)
	exec(t, db.SQL(), `INSERT INTO users VALUES (1, 'a'), (2, 'a')`)
	if _, err := db.ExecContext(context.Background(), `CREATE UNIQUE INDEX CONCURRENTLY users_email ON users (email)`); err == nil {
		t.Fatal("the concurrent build succeeded on duplicates")
	}
	rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "users", Keys: []string{"email"}, IndexName: "users_email", IfNotExists: true})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(rep.Warnings, "\n")
	if !strings.Contains(all, `"users_email" exists but is INVALID`) || !strings.Contains(all, "IF NOT EXISTS") {
		t.Fatalf("warnings: %s", all)
	}
}
