package dsn_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestOutside2EdgesParseRefusesSchemesCloseToItsOwn tries the spellings
// next to the two schemes Parse takes: postgresql without its slashes (as
// postgres:db is), and sqlite: or postgres:// in another case. Each is an
// unknown scheme, never a file path or a URL handed on.
func TestOutside2EdgesParseRefusesSchemesCloseToItsOwn(t *testing.T) {
	t.Parallel()
	for in, scheme := range map[string]string{
		"postgresql:db":      "postgresql",
		"postgresql:/h/db":   "postgresql",
		"SQLite:app.db":      "SQLite",
		"SQLITE:app.db":      "SQLITE",
		"Sqlite:///tmp/a.db": "Sqlite",
		"Postgres://u@h/db":  "Postgres",
	} {
		engine, addr, err := dsn.Parse(in)
		if !errors.Is(err, racefree.ErrInvalidInput) || engine != "" || addr != "" {
			t.Errorf("Parse(%q) = %q, %q, %v; want ErrInvalidInput and nothing else", in, engine, addr, err)
			continue
		}
		if says := `unknown scheme "` + scheme + `"`; !strings.Contains(err.Error(), says) {
			t.Errorf("Parse(%q): %q, want it to say %s", in, err, says)
		}
	}
}

// TestOutside2EdgesOpenRefusesWhatParseRefuses: Open and OpenExisting
// refuse each DSN Parse refuses with an error that matches
// racefree.ErrInvalidInput (bad input, not a failure to connect), and
// return no database.
func TestOutside2EdgesOpenRefusesWhatParseRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, in := range []string{"", "app.db", "sqlite:", "sqlite://", "mysql://h/db", "postgres:db"} {
		for name, open := range map[string]func(context.Context, string, *racefree.Config) (*racefree.DB, error){
			"Open": dsn.Open, "OpenExisting": dsn.OpenExisting,
		} {
			db, err := open(ctx, in, &racefree.Config{Schema: racefree.SchemaMigrate})
			if db != nil {
				db.Close()
			}
			if db != nil || !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%s(%q) = %v, %v; want no database and ErrInvalidInput", name, in, db, err)
			}
		}
	}
}

// TestOutside2EdgesEngineUsesThePathAlone: the SQLite engine Engine
// returns works on the DSN's path, its scheme left out: a database made
// through it is the file at that path, relative to the working directory
// as well as absolute, and no file named after the whole DSN appears.
func TestOutside2EdgesEngineUsesThePathAlone(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	abs := filepath.Join(t.TempDir(), "abs.db")
	for in, path := range map[string]string{
		"sqlite:rel.db":   filepath.Join(dir, "rel.db"),
		"sqlite:" + abs:   abs,
		"sqlite://" + abs: abs,
	} {
		os.Remove(path)
		e, err := dsn.Engine(in)
		if err != nil {
			t.Fatalf("Engine(%q): %v", in, err)
		}
		db, err := racefree.New(context.Background(), e, &racefree.Config{Schema: racefree.SchemaMigrate})
		if err != nil {
			t.Fatalf("Engine(%q): opening a database on it: %v", in, err)
		}
		db.Close()
		if _, err := os.Stat(path); err != nil {
			t.Errorf("Engine(%q): no database at %s: %v", in, path, err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, entry := range entries {
			if strings.HasPrefix(entry.Name(), "sqlite:") {
				t.Errorf("Engine(%q): a file named %q in the working directory", in, entry.Name())
			}
		}
	}
}

// TestOutside2EdgesOpenExistingKeepsTheConfig: OpenExisting hands the
// caller's Config to the engine, on both: a database that exists but
// holds no schema yet is migrated when the caller asks for SchemaMigrate
// (and refused under the default, SchemaRequireCurrent), and keeps the
// Config's clock.
func TestOutside2EdgesOpenExistingKeepsTheConfig(t *testing.T) {
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		if path, ok := strings.CutPrefix(d, "sqlite:"); ok {
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if db, err := dsn.OpenExisting(ctx, d, nil); err == nil {
			db.Close()
			t.Fatalf("OpenExisting of a database with no schema, under the default policy: no error")
		}
		clock := racefree.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		db, err := dsn.OpenExisting(ctx, d, &racefree.Config{Schema: racefree.SchemaMigrate, Clock: clock})
		if err != nil {
			t.Fatalf("OpenExisting with SchemaMigrate of a database with no schema: %v", err)
		}
		defer db.Close()
		if err := db.CheckSchema(ctx); err != nil {
			t.Errorf("the migrated database: %v", err)
		}
		if db.Clock() != racefree.Clock(clock) {
			t.Errorf("the database's clock is not the one its Config gave")
		}
	})
}

// TestOutside2EdgesOpenStopsWhenCancelled: Open and OpenExisting work
// under the caller's context, on both engines: cancelled before they
// start, they return context.Canceled and no database, for a database
// that exists and one that does not yet.
func TestOutside2EdgesOpenStopsWhenCancelled(t *testing.T) {
	testdb.EachDSN(t, func(t *testing.T, d string) {
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		cfg := &racefree.Config{Schema: racefree.SchemaMigrate}
		if db, err := dsn.Open(cancelled, d, cfg); db != nil || !errors.Is(err, context.Canceled) {
			if db != nil {
				db.Close()
			}
			t.Fatalf("Open, cancelled, of a new database: %v, %v; want no database and context.Canceled", db, err)
		}
		db, err := dsn.Open(context.Background(), d, cfg)
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		for name, open := range map[string]func(context.Context, string, *racefree.Config) (*racefree.DB, error){
			"Open": dsn.Open, "OpenExisting": dsn.OpenExisting,
		} {
			if db, err := open(cancelled, d, cfg); db != nil || !errors.Is(err, context.Canceled) {
				if db != nil {
					db.Close()
				}
				t.Errorf("%s, cancelled, of an existing database: %v, %v; want no database and context.Canceled", name, db, err)
			}
		}
	})
}
