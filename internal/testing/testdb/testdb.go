// Package testdb gives each test a fresh racefree database on each engine:
// a SQLite file in t.TempDir(), and a PostgreSQL schema of its own, created
// on the server named by TEST_DATABASE_URL and dropped when the test ends.
//
// Without TEST_DATABASE_URL the PostgreSQL half of a test is skipped with one
// line saying so; RACEFREE_REQUIRE_POSTGRES=1 (set in CI) turns that skip
// into a failure, so that CI can never pass on SQLite alone.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the admin connection that creates schemas
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
)

// Engines are the engines Each runs a test on, in order.
var Engines = []string{racefree.SQLite, racefree.Postgres}

// Each runs body once per engine, as the subtests "sqlite" and "postgres",
// each with a fresh database migrated to the current schema and configured
// with cfg (nil for defaults).
func Each(t *testing.T, cfg *racefree.Config, body func(t *testing.T, db *racefree.DB)) {
	t.Helper()
	for _, engine := range Engines {
		t.Run(engine, func(t *testing.T) {
			body(t, Open(t, NewDSN(t, engine), cfg))
		})
	}
}

// EachPath runs body on each engine (Each) twice, as the subtests
// "combined" (CombineOn: through the combiner) and "alone" (CombineOff:
// one call per transaction). A call on the pool takes either path, and
// each must give the outcome the other does; a test of a promise both
// keep runs here, so that it proves both whatever RACEFREE_COMBINE says
// and whatever the mutation runner sets. cfg is nil for defaults; its
// Combine is overwritten.
func EachPath(t *testing.T, cfg *racefree.Config, body func(t *testing.T, db *racefree.DB)) {
	t.Helper()
	for _, p := range []struct {
		name   string
		policy racefree.CombinePolicy
	}{{"combined", racefree.CombineOn}, {"alone", racefree.CombineOff}} {
		var c racefree.Config
		if cfg != nil {
			c = *cfg
		}
		c.Combine = p.policy
		t.Run(p.name, func(t *testing.T) { Each(t, &c, body) })
	}
}

// EachDSN runs body once per engine with the DSN of a fresh, empty database,
// for tests that open it themselves or hand it to other processes.
func EachDSN(t *testing.T, body func(t *testing.T, dsn string)) {
	t.Helper()
	for _, engine := range Engines {
		t.Run(engine, func(t *testing.T) { body(t, NewDSN(t, engine)) })
	}
}

// NewDSN returns the DSN of a fresh, empty database on engine that is
// removed when the test ends.
func NewDSN(t testing.TB, engine string) string {
	t.Helper()
	if engine == racefree.SQLite {
		return "sqlite:" + filepath.Join(t.TempDir(), "racefree.db")
	}
	base := PostgresURL(t)
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	schema := "rf_test_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatalf("testdb: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("testdb: drop schema: %v", err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testdb: TEST_DATABASE_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// PostgresURL returns TEST_DATABASE_URL, or skips the test (fails it when
// RACEFREE_REQUIRE_POSTGRES=1) when it is not set.
func PostgresURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("TEST_DATABASE_URL")
	if u != "" {
		return u
	}
	const msg = "TEST_DATABASE_URL is not set, so the PostgreSQL half of this test did not run (e.g. TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres)"
	if os.Getenv("RACEFREE_REQUIRE_POSTGRES") == "1" {
		t.Fatal(msg + "; RACEFREE_REQUIRE_POSTGRES=1 requires it")
	}
	t.Skip(msg)
	return ""
}

// Open opens dsn with cfg and closes it when the test ends. Unless cfg asks
// for another schema policy, it migrates the database first: a SQLite file
// that does not exist yet starts as a copy of one this process migrated
// once, which migrating then finds current. The combiner is on by default
// ([racefree.Config.Combine]); with RACEFREE_COMBINE=0 in the environment
// Open turns it off (CombineOff) wherever cfg left it at CombineDefault, so
// that a package's suites run without it too. RACEFREE_COMBINE=1 turns it
// on (CombineOn) there. A cfg that asks for CombineOn or CombineOff keeps
// what it asked for.
func Open(t testing.TB, dsnStr string, cfg *racefree.Config) *racefree.DB {
	t.Helper()
	c := racefree.Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Schema == racefree.SchemaRequireCurrent {
		c.Schema = racefree.SchemaMigrate
	}
	if c.Combine == racefree.CombineDefault {
		switch os.Getenv("RACEFREE_COMBINE") {
		case "0":
			c.Combine = racefree.CombineOff
		case "1":
			c.Combine = racefree.CombineOn
		}
	}
	if path, ok := strings.CutPrefix(dsnStr, "sqlite:"); ok && c.Schema == racefree.SchemaMigrate {
		startMigrated(t, path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := dsn.Open(ctx, dsnStr, &c)
	if err != nil {
		t.Fatalf("testdb: open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// startMigrated creates the SQLite file path, unless it exists, as a copy of
// sqliteTemplate. Migrating a SQLite file parses every statement of every
// migration, and the schema again at each step: under -race, most of the
// CPU a package's tests spent, paid again for each test.
func startMigrated(t testing.TB, path string) {
	t.Helper()
	b, err := sqliteTemplate()
	if err != nil {
		t.Fatalf("testdb: migrated template: %v", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return
	}
	if err == nil {
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
}

// sqliteTemplate returns the bytes of a SQLite database migrated to the
// current schema, made once per process.
var sqliteTemplate = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "racefree-testdb-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "racefree.db")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, err := dsn.Open(ctx, "sqlite:"+path, &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		return nil, err
	}
	// Fold the write-ahead log into the file: the file alone is then the
	// whole database.
	_, err = db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return os.ReadFile(path)
})

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
