package racefree_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// TestErrorsMatchTheirSentinelsAndSayWhy: each error type matches its
// own sentinels and no other, and its message says which way the schema
// is off, or why a node refused the write, with and without each part.
func TestErrorsMatchTheirSentinelsAndSayWhy(t *testing.T) {
	t.Parallel()
	newer := &racefree.SchemaError{Have: 3, Want: 2}
	older := &racefree.SchemaError{Have: 1, Want: 2}
	if !errors.Is(newer, racefree.ErrSchemaTooNew) || errors.Is(newer, racefree.ErrSchemaOutdated) || !strings.Contains(newer.Error(), "newer than this racefree") {
		t.Errorf("a newer schema: %v", newer)
	}
	if !errors.Is(older, racefree.ErrSchemaOutdated) || errors.Is(older, racefree.ErrSchemaTooNew) || !strings.Contains(older.Error(), "racefree migrate up") {
		t.Errorf("an older schema: %v", older)
	}

	driver := errors.New("driver says no")
	for _, c := range []struct {
		err  *racefree.ReadOnlyError
		want string
	}{
		{&racefree.ReadOnlyError{}, "racefree: database is read-only"},
		{&racefree.ReadOnlyError{Reason: "in recovery"}, "racefree: database is read-only: in recovery"},
		{&racefree.ReadOnlyError{Err: driver}, "racefree: database is read-only: driver says no"},
		{&racefree.ReadOnlyError{Reason: "in recovery", Err: driver}, "racefree: database is read-only: in recovery: driver says no"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("ReadOnlyError %+v: %q, want %q", *c.err, got, c.want)
		}
		if !errors.Is(c.err, racefree.ErrReadOnly) || !errors.Is(c.err, racefree.ErrUnavailable) || errors.Is(c.err, racefree.ErrNotDurable) {
			t.Errorf("ReadOnlyError %+v: matches ErrReadOnly %v, ErrUnavailable %v, ErrNotDurable %v; want true, true, false", *c.err,
				errors.Is(c.err, racefree.ErrReadOnly), errors.Is(c.err, racefree.ErrUnavailable), errors.Is(c.err, racefree.ErrNotDurable))
		}
	}
	nd := &racefree.NotDurableError{Reason: "no standby", Err: driver}
	if !errors.Is(nd, racefree.ErrNotDurable) || !errors.Is(nd, racefree.ErrUnavailable) || errors.Is(nd, racefree.ErrReadOnly) || !errors.Is(nd, driver) {
		t.Errorf("NotDurableError: %v", nd)
	}

	if racefree.NotCommitted(nil) != nil {
		t.Error("NotCommitted(nil) is not nil")
	}
	if nc := racefree.NotCommitted(driver); !errors.Is(nc, racefree.ErrNotCommitted) || !errors.Is(nc, driver) || nc.Error() != driver.Error() {
		t.Errorf("NotCommitted: %v", nc)
	}
	if errors.Is(driver, racefree.ErrNotCommitted) {
		t.Error("an unmarked error matches ErrNotCommitted")
	}
}

// TestInterpretAutocommit: a statement that commits by itself and whose
// context ended once it was sent may have committed on PostgreSQL (the
// server runs it all the same): its error matches ErrUnavailable as well
// as the context's error. On SQLite, which rolls it back, it stays the
// context's error. Nil, errors already interpreted and other errors
// pass as they are.
func TestInterpretAutocommit(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		if err := wire.Of(db).InterpretAutocommit(nil); err != nil {
			t.Errorf("nil: %v", err)
		}
		for _, ctxErr := range []error{context.Canceled, context.DeadlineExceeded} {
			err := wire.Of(db).InterpretAutocommit(fmt.Errorf("exec: %w", ctxErr))
			if !errors.Is(err, ctxErr) || errors.Is(err, racefree.ErrUnavailable) != (db.Engine() == racefree.Postgres) {
				t.Errorf("%v: got %v; want it, and ErrUnavailable on PostgreSQL only", ctxErr, err)
			}
		}
		other := errors.New("syntax error")
		if err := wire.Of(db).InterpretAutocommit(other); errors.Is(err, racefree.ErrUnavailable) {
			t.Errorf("another error: %v, want not ErrUnavailable", err)
		}
		lost := fmt.Errorf("%w: %w", racefree.ErrUnavailable, context.Canceled)
		if err := wire.Of(db).InterpretAutocommit(lost); err != lost {
			t.Errorf("an error already ErrUnavailable: %v, want it as it is", err)
		}
	})
}

// TestSchemaAtLeastAtTheVersion: a DB in compatible mode sees a migration
// another process applied as soon as it lands, at exactly the version
// asked for, and not one version further; MigrateUpTo(0) applies
// nothing, MigrateUpTo(v) applies up to v itself.
func TestSchemaAtLeastAtTheVersion(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		cfg := &racefree.Config{Schema: racefree.SchemaAllowOutdated}
		migrator := testdb.Open(t, d, cfg)
		if applied, err := migrator.MigrateUpTo(ctx, 0); err != nil || len(applied) != 0 {
			t.Fatalf("MigrateUpTo(0): %d applied, %v; want none", len(applied), err)
		}
		v := int64(tenant.TenantsVersion)
		if applied, err := migrator.MigrateUpTo(ctx, v-1); err != nil || len(applied) == 0 || applied[len(applied)-1].Version != v-1 {
			t.Fatalf("MigrateUpTo(%d): %v, %v", v-1, applied, err)
		}
		reader := testdb.Open(t, d, cfg)
		if ok, err := wire.Of(reader).SchemaAtLeast(ctx, reader, v); err != nil || ok {
			t.Fatalf("SchemaAtLeast(%d) at version %d: %v, %v; want false", v, v-1, ok, err)
		}
		if _, err := migrator.MigrateUpTo(ctx, v); err != nil {
			t.Fatal(err)
		}
		if ok, err := wire.Of(reader).SchemaAtLeast(ctx, reader, v); err != nil || !ok {
			t.Fatalf("SchemaAtLeast(%d) at version %d: %v, %v; want true", v, v, ok, err)
		}
		if ok, err := wire.Of(reader).SchemaAtLeast(ctx, reader, v+1); err != nil || ok {
			t.Fatalf("SchemaAtLeast(%d) at version %d: %v, %v; want false", v+1, v, ok, err)
		}
	})
}

// endedTx returns a transaction of db already rolled back: an executor
// through which every query fails with sql.ErrTxDone.
func endedTx(t *testing.T, db *racefree.DB) *sql.Tx {
	t.Helper()
	tx, err := db.SQL().BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	return tx
}

// TestSchemaAtLeastAnswersFromMemory: once a DB has seen version v
// applied (Open records it), asking whether v or an earlier version is
// applied reads nothing: it answers through an executor that could not run
// a query, a transaction already ended. Asking for a version it has not
// seen reads the database through that executor, and its error comes back.
func TestSchemaAtLeastAnswersFromMemory(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		v, err := db.CodeVersion()
		if err != nil {
			t.Fatal(err)
		}
		tx := endedTx(t, db)
		for _, at := range []int64{v - 1, v} {
			if ok, err := wire.Of(db).SchemaAtLeast(ctx, tx, at); !ok || err != nil {
				t.Fatalf("version %d at schema %d: %v, %v; want true from memory, no query", at, v, ok, err)
			}
		}
		if ok, err := wire.Of(db).SchemaAtLeast(ctx, tx, v+1); ok || !errors.Is(err, sql.ErrTxDone) {
			t.Fatalf("version %d at schema %d: %v, %v; want the read through the ended transaction to fail", v+1, v, ok, err)
		}
	})
}

// TestSchemaAtLeastRemembersItsOwnMigration: a DB that migrates the
// schema itself knows the version it applied; it answers from memory
// afterwards, without a query (through an ended transaction).
func TestSchemaAtLeastRemembersItsOwnMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		v, err := db.CodeVersion()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.MigrateUpTo(ctx, v-1); err != nil {
			t.Fatal(err)
		}
		if applied, err := db.MigrateUp(ctx); err != nil || len(applied) != 1 || applied[0].Version != v {
			t.Fatalf("MigrateUp from %d: %v, %v; want version %d applied", v-1, applied, err, v)
		}
		tx := endedTx(t, db)
		if ok, err := wire.Of(db).SchemaAtLeast(ctx, tx, v); !ok || err != nil {
			t.Fatalf("version %d after migrating to it: %v, %v; want true from memory, no query", v, ok, err)
		}
	})
}

// TestLoadMigrations: migrations load in version order, not in the
// order of their names; a version that
// appears twice, or a file not named NNN_name.sql, is refused.
func TestLoadMigrations(t *testing.T) {
	t.Parallel()
	ms, err := racefree.LoadMigrations(fstest.MapFS{
		"002_b.sql":  {Data: []byte("SELECT 2")},
		"001_a.sql":  {Data: []byte("SELECT 1")},
		"999_c.sql":  {Data: []byte("SELECT 999")},
		"1000_d.sql": {Data: []byte("SELECT 1000")}, // read before 999_c.sql: names sort as text
	})
	if err != nil || len(ms) != 4 || ms[0].Version != 1 || ms[1].Version != 2 || ms[2].Version != 999 || ms[3].Version != 1000 || ms[3].Name != "d" {
		t.Fatalf("four migrations: %+v, %v", ms, err)
	}
	if _, err := racefree.LoadMigrations(fstest.MapFS{
		"001_a.sql": {Data: []byte("SELECT 1")},
		"001_b.sql": {Data: []byte("SELECT 1")},
	}); err == nil || !strings.Contains(err.Error(), "appears twice") {
		t.Errorf("a version twice: %v, want an error", err)
	}
	if _, err := racefree.LoadMigrations(fstest.MapFS{"1_a.sql": {Data: []byte("SELECT 1")}}); err == nil {
		t.Error("a name not NNN_name.sql: no error")
	}
}
