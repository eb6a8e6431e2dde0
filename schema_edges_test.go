package racefree_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// Edges of Open and of the schema's migrations, written from the code of
// racefree.go and migrate.go: a policy Open does not know, a migration
// target below the version applied, what a DB remembers of a migration
// that stopped early, when each migration landed, and one fresh SQLite
// file opened by many at once.

// TestEdgesOpenRefusesASchemaPolicyItDoesNotKnow: a Schema policy outside
// the three Open knows is an *InputError, never a schema used unchecked.
func TestEdgesOpenRefusesASchemaPolicyItDoesNotKnow(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		for _, p := range []racefree.SchemaPolicy{racefree.SchemaAllowOutdated + 1, -1} {
			_, err := open(t, d, p)
			var in *racefree.InputError
			if !errors.As(err, &in) || in.Field != "Schema" {
				t.Fatalf("policy %d on a schema never migrated: Open returned %v; want an *InputError for Schema", p, err)
			}
		}
	})
}

// TestEdgesASchemaNeverMigratedBesideAMigratedOne: on PostgreSQL a
// schema never migrated is at version 0, outdated, whatever other
// schemas of the database hold: racefree reads its own schema's
// migrations, never another's.
func TestEdgesASchemaNeverMigratedBesideAMigratedOne(t *testing.T) {
	t.Parallel()
	testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), &racefree.Config{Schema: racefree.SchemaMigrate})
	fresh := testdb.NewDSN(t, racefree.Postgres)
	if _, err := open(t, fresh, racefree.SchemaRequireCurrent); !errors.Is(err, racefree.ErrSchemaOutdated) {
		t.Fatalf("a schema never migrated beside a migrated one: Open returned %v; want ErrSchemaOutdated", err)
	}
	db, err := open(t, fresh, racefree.SchemaAllowOutdated)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := db.SchemaVersion(context.Background()); err != nil || v != 0 {
		t.Fatalf("SchemaVersion of a schema never migrated: %d, %v; want 0", v, err)
	}
}

// TestEdgesMigrateUpToBelowTheAppliedVersion: asked to stop at a version
// below the one applied, MigrateUpTo has nothing to do and says so; only
// a version beyond the code's last is a schema too new.
func TestEdgesMigrateUpToBelowTheAppliedVersion(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		v, err := db.CodeVersion()
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range []int64{0, 1, v - 1, v} {
			if applied, err := db.MigrateUpTo(ctx, target); err != nil || len(applied) != 0 {
				t.Fatalf("MigrateUpTo(%d) at version %d: %d applied, %v; want none, nil", target, v, len(applied), err)
			}
		}
		if err := db.CheckSchema(ctx); err != nil {
			t.Fatalf("after the migrations that had nothing to do: %v", err)
		}
	})
}

// TestEdgesMigrateUpToRemembersOnlyWhatItApplied: a DB that migrated
// itself to an earlier version than the code's stays in compatible mode
// for the versions it did not apply, and leaves it once the next lands.
func TestEdgesMigrateUpToRemembersOnlyWhatItApplied(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		v := int64(tenant.TenantsVersion)
		if _, err := db.MigrateUpTo(ctx, v-1); err != nil {
			t.Fatal(err)
		}
		if ok, err := wire.Of(db).SchemaAtLeast(ctx, db, v); err != nil || ok {
			t.Fatalf("SchemaAtLeast(%d) after MigrateUpTo(%d) on the same DB: %v, %v; want false", v, v-1, ok, err)
		}
		if ok, err := wire.Of(db).SchemaAtLeast(ctx, db, v-1); err != nil || !ok {
			t.Fatalf("SchemaAtLeast(%d) after MigrateUpTo(%d): %v, %v; want true", v-1, v-1, ok, err)
		}
		if _, err := db.MigrateUpTo(ctx, v); err != nil {
			t.Fatal(err)
		}
		if ok, err := wire.Of(db).SchemaAtLeast(ctx, db, v); err != nil || !ok {
			t.Fatalf("SchemaAtLeast(%d) after MigrateUpTo(%d): %v, %v; want true", v, v, ok, err)
		}
	})
}

// TestEdgesMigrationStatusSaysWhenEachLanded: MigrationStatus gives each
// applied migration the time it was applied, read from the DB's clock,
// and 0 to one not applied.
func TestEdgesMigrationStatusSaysWhenEachLanded(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		clock := racefree.NewManualClock(time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC))
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Clock: clock})
		v := int64(tenant.TenantsVersion)
		if _, err := db.MigrateUpTo(ctx, v-1); err != nil {
			t.Fatal(err)
		}
		first := racefree.Millis(clock.Now())
		clock.Advance(time.Hour)
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		later := racefree.Millis(clock.Now())
		st, err := db.MigrationStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			want := first
			if s.Version >= v {
				want = later
			}
			if !s.Applied || s.AppliedAt != want {
				t.Fatalf("migration %d: applied %v at %d; want applied at %d", s.Version, s.Applied, s.AppliedAt, want)
			}
		}
	})
}

// openChildEnv names the SQLite file a child process of
// TestEdgesManyOpenOneFreshSQLiteFile opens (see TestMain).
const openChildEnv = "RACEFREE_OPEN_CHILD"

// openChild opens and migrates the file openChildEnv names, and says
// why it could not on stderr.
func openChild() int {
	db, err := dsn.Open(context.Background(), "sqlite:"+os.Getenv(openChildEnv), &racefree.Config{Schema: racefree.SchemaMigrate})
	if err == nil {
		err = db.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestEdgesManyOpenOneFreshSQLiteFile: processes started at once on one
// SQLite file that does not exist yet all open and migrate it, though
// most of them find another switching the file to WAL, which fails with
// SQLITE_BUSY at once rather than waiting for the lock.
func TestEdgesManyOpenOneFreshSQLiteFile(t *testing.T) {
	t.Parallel()
	const files, opens = 4, 8
	for f := range files {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("fresh-%d.db", f))
		cmds := make([]*exec.Cmd, opens)
		outs := make([]*bytes.Buffer, opens)
		for i := range cmds {
			cmds[i] = exec.Command(os.Args[0], "-test.run=^$")
			cmds[i].Env = append(os.Environ(), openChildEnv+"="+path)
			outs[i] = new(bytes.Buffer)
			cmds[i].Stderr = outs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("file %d: process %d of %d opened at once: %v: %s", f, i, opens, err, outs[i])
			}
		}
	}
}
