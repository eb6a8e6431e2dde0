package racefree_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(openChildEnv) != "" {
		os.Exit(openChild())
	}
	goleak.VerifyTestMain(m)
}

func open(t *testing.T, d string, policy racefree.SchemaPolicy) (*racefree.DB, error) {
	t.Helper()
	db, err := dsn.Open(context.Background(), d, &racefree.Config{Schema: policy})
	if err == nil {
		t.Cleanup(func() { _ = db.Close() })
	}
	return db, err
}

func TestOpenRefusesOutdatedSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		_, err := open(t, d, racefree.SchemaRequireCurrent)
		if !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("got %v, want ErrSchemaOutdated", err)
		}
		db, err := open(t, d, racefree.SchemaAllowOutdated)
		if err != nil {
			t.Fatalf("allow outdated: %v", err)
		}
		if v, err := db.SchemaVersion(context.Background()); err != nil || v != 0 {
			t.Fatalf("schema version = %d, %v; want 0: nothing may be written", v, err)
		}
	})
}

func TestMigrateUpAppliesEachVersionOnce(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				db, err := open(t, d, racefree.SchemaMigrate)
				if err == nil {
					err = db.CheckSchema(ctx)
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("concurrent migrate: %v", err)
			}
		}
		db, err := open(t, d, racefree.SchemaRequireCurrent)
		if err != nil {
			t.Fatal(err)
		}
		st, err := db.MigrationStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := db.Migrations()
		if got, want := len(st), len(ms); got != want {
			t.Fatalf("status lists %d migrations, want %d", got, want)
		}
		for _, s := range st {
			if !s.Applied || s.AppliedAt == 0 {
				t.Errorf("migration %d not applied", s.Version)
			}
		}
		var rows int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_schema_migrations`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != len(ms) {
			t.Fatalf("racefree_schema_migrations has %d rows, want %d", rows, len(ms))
		}
		if applied, err := db.MigrateUp(ctx); err != nil || len(applied) != 0 {
			t.Fatalf("second MigrateUp applied %d, %v; want 0, nil", len(applied), err)
		}
	})
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, nil)
		if _, err := db.ExecContext(ctx, `INSERT INTO racefree_schema_migrations (version, name, applied_at) VALUES (999, 'from_the_future', 0)`); err != nil {
			t.Fatal(err)
		}
		for _, p := range []racefree.SchemaPolicy{racefree.SchemaRequireCurrent, racefree.SchemaMigrate, racefree.SchemaAllowOutdated} {
			_, err := open(t, d, p)
			var se *racefree.SchemaError
			if !errors.Is(err, racefree.ErrSchemaTooNew) || !errors.As(err, &se) || se.Have != 999 {
				t.Fatalf("policy %d: got %v, want ErrSchemaTooNew at 999", p, err)
			}
		}
	})
}

func TestMigrationScriptMatchesMigrateUp(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		engine, err := dsn.Engine(d)
		if err != nil {
			t.Fatal(err)
		}
		script, err := racefree.MigrationScript(engine)
		if err != nil {
			t.Fatal(err)
		}
		db, err := open(t, d, racefree.SchemaAllowOutdated)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, script); err != nil {
			t.Fatalf("running the script: %v", err)
		}
		if _, err := open(t, d, racefree.SchemaRequireCurrent); err != nil {
			t.Fatalf("after the script: %v", err)
		}
		_ = engine.SQL().Close()
	})
}

func TestInTxInterpretsErrorsAndRollsBack(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		ins := `INSERT INTO racefree_claims (tenant, ns, key, holder, count, first_seen, last_seen) VALUES ('default', 't', 'k', 'h', 1, 0, 0)`
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, ins); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, ins)
			return err
		})
		if !errors.Is(err, racefree.ErrConflict) {
			t.Fatalf("got %v, want ErrConflict", err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_claims`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("rows after rollback = %d, %v; want 0", n, err)
		}
		err = wire.Of(db).InterpretError(db.QueryRowContext(ctx, `SELECT ns FROM racefree_claims`).Scan(new(string)))
		if !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
	})
}

func TestDSNErrors(t *testing.T) {
	t.Parallel()
	for _, d := range []string{"mysql://x", "racefree.db", "sqlite:", "sqlite:/no/such/dir/x.db", "sqlite::memory:"} {
		if _, err := dsn.Open(context.Background(), d, nil); err == nil {
			t.Errorf("%q: want an error", d)
		}
	}
	if _, err := dsn.Open(context.Background(), "mysql://x", nil); !errors.Is(err, racefree.ErrInvalidInput) {
		t.Errorf("unknown scheme: got %v, want ErrInvalidInput", err)
	}
}

func TestCheckText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"a", true}, {"héll", true}, {"12345", true}, {"123456", false},
		{"", false}, {"a\x00b", false}, {"\xff", false},
	} {
		err := racefree.CheckText("key", c.in, 5)
		if got := err == nil; got != c.ok {
			t.Errorf("CheckText(%q) = %v, want ok=%v", c.in, err, c.ok)
		}
		if err != nil && !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("CheckText(%q) = %v, not an InputError", c.in, err)
		}
	}
}

// TestCompatibleModeWithAPoolOfOne proves that compatible mode reads the
// schema version through the caller's executor: with MaxOpenConns 1 and the
// previous schema, a claim acquired inside the caller's transaction (which
// holds the only connection) finishes, with ErrSchemaOutdated, instead of
// waiting for the pool forever, and the same DB switches to the new schema
// once it lands.
func TestCompatibleModeWithAPoolOfOne(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, MaxOpenConns: 1})
		if _, err := db.MigrateUpTo(context.Background(), tenant.TenantsVersion-1); err != nil {
			t.Fatal(err)
		}
		// A deadlock waits forever; a deadline on each transaction (and not
		// on the migration between them, which a loaded machine can make
		// slow) turns it into a failure.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		claims := claim.New(db)
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if modern, err := wire.Of(db).SchemaAtLeast(ctx, tx, tenant.TenantsVersion); err != nil || modern {
				return fmt.Errorf("SchemaAtLeast(%d) on version %d = %v, %w; want false", tenant.TenantsVersion, tenant.TenantsVersion-1, modern, err)
			}
			_, err := claims.Acquire(ctx, tx, "k", "a", time.Minute)
			return err
		})
		if !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("acquire in the caller's transaction on a pool of one: %v, want ErrSchemaOutdated", err)
		}
		if _, err := db.MigrateUp(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			if modern, err := wire.Of(db).SchemaAtLeast(ctx, tx, tenant.TenantsVersion); err != nil || !modern {
				return fmt.Errorf("SchemaAtLeast(%d) after the migration = %v, %w; want true", tenant.TenantsVersion, modern, err)
			}
			_, err := claims.Acquire(ctx, tx, "k2", "a", time.Minute)
			return err
		})
		if err != nil {
			t.Fatalf("after the migration: %v", err)
		}
	})
}

// TestPreparedOncePerDBOnSQLiteOnly: on SQLite Prepared returns one
// statement per query text, which runs (and writes) through the pool; on
// PostgreSQL, where a prepared statement is session state that a
// transaction-mode pooler does not keep, and for a query that does not
// prepare, it returns nil.
func TestPreparedOncePerDBOnSQLiteOnly(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		const q = `SELECT count(*) FROM racefree_schema_migrations`
		st := wire.Of(db).Prepared(ctx, q)
		if db.Engine() == racefree.Postgres {
			if st != nil {
				t.Fatal("PostgreSQL: a prepared statement, want nil")
			}
			return
		}
		if st == nil || wire.Of(db).Prepared(ctx, q) != st {
			t.Fatalf("SQLite: %p then %p, want one statement", st, wire.Of(db).Prepared(ctx, q))
		}
		var n int
		if err := st.QueryRowContext(ctx).Scan(&n); err != nil || n == 0 {
			t.Fatalf("the prepared statement: %d, %v", n, err)
		}
		if st := wire.Of(db).Prepared(ctx, `SELECT * FROM no_such_table`); st != nil {
			t.Fatal("a query that does not prepare: a statement, want nil")
		}
	})
}

// TestStrictModeIsRefusedOnSQLite: RequireSynchronousReplication on
// SQLite, which has no standby to wait for, fails Open with an
// *InputError naming the option, instead of promising a durability no
// statement checks.
func TestStrictModeIsRefusedOnSQLite(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/strict.db"
	db, err := dsn.Open(context.Background(), "sqlite:"+path, &racefree.Config{RequireSynchronousReplication: true})
	var ie *racefree.InputError
	if !errors.As(err, &ie) || ie.Field != "RequireSynchronousReplication" {
		if db != nil {
			_ = db.Close()
		}
		t.Fatalf("Open on SQLite with RequireSynchronousReplication: %v, want an *InputError naming the option", err)
	}
}

// TestMigrationStatusListsUnknownVersionsInOrder: versions applied to the
// database that the code does not know (a newer racefree migrated it) come
// after the known ones, in version order, whatever order they were
// applied in.
func TestMigrationStatusListsUnknownVersionsInOrder(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		v, err := db.CodeVersion()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO racefree_schema_migrations (version, name, applied_at) VALUES (%d, 'later', 1), (%d, 'next', 1)`, v+2, v+1)); err != nil {
			t.Fatal(err)
		}
		st, err := db.MigrationStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(st)) != v+2 {
			t.Fatalf("%d statuses; want %d", len(st), v+2)
		}
		for i, s := range st {
			if s.Version != int64(i+1) || !s.Applied {
				t.Fatalf("status %d: %+v; want version %d, applied (all: %+v)", i, s, i+1, st)
			}
		}
		if st[v].Name != "next" || st[v+1].Name != "later" {
			t.Fatalf("the unknown versions: %+v, %+v; want next, then later", st[v], st[v+1])
		}
	})
}
