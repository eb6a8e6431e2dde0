package dsn_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/sqlite"
)

// TestEdgesParseRefusesWhatNamesNoDatabase tries the DSNs at the edge of
// each scheme: a SQLite DSN with its slashes and no path, a scheme
// without its slashes or with a letter more, a colon with no scheme
// before it. Each is refused as bad input, and the message names what
// is wrong.
func TestEdgesParseRefusesWhatNamesNoDatabase(t *testing.T) {
	t.Parallel()
	for in, says := range map[string]string{
		"sqlite://":     "needs a file path",
		"sqlite:":       "needs a file path",
		":app.db":       "has no scheme",
		"app.db":        "has no scheme",
		"postgres:db":   `unknown scheme "postgres"`,
		"postgresx://h": `unknown scheme "postgresx"`,
		"postgre://h":   `unknown scheme "postgre"`,
		"mysql://h/db":  `unknown scheme "mysql"`,
	} {
		engine, addr, err := dsn.Parse(in)
		if !errors.Is(err, racefree.ErrInvalidInput) || engine != "" || addr != "" {
			t.Errorf("Parse(%q) = %q, %q, %v; want ErrInvalidInput and nothing else", in, engine, addr, err)
			continue
		}
		if !strings.Contains(err.Error(), says) {
			t.Errorf("Parse(%q): %q, want it to say %q", in, err, says)
		}
	}
}

// TestEdgesEngineAndOpenFollowTheScheme checks that each scheme reaches
// its own engine, through Engine (no I/O) and through Open, and that a
// DSN Parse refuses reaches none.
func TestEdgesEngineAndOpenFollowTheScheme(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.db")
	for in, want := range map[string]string{
		"sqlite:" + path:      racefree.SQLite,
		"postgres://u@h/db":   racefree.Postgres,
		"postgresql://u@h/db": racefree.Postgres,
		"sqlite://" + path:    racefree.SQLite,
	} {
		e, err := dsn.Engine(in)
		if err != nil || e.Name() != want {
			name := ""
			if e != nil {
				name = e.Name()
			}
			t.Errorf("Engine(%q) = %q, %v; want %s", in, name, err, want)
		}
	}
	if e, err := dsn.Engine("mysql://h/db"); !errors.Is(err, racefree.ErrInvalidInput) || e != nil {
		t.Errorf("Engine(mysql://…) = %v, %v; want ErrInvalidInput", e, err)
	}
	for _, engine := range testdb.Engines {
		t.Run(engine, func(t *testing.T) {
			db, err := dsn.Open(context.Background(), testdb.NewDSN(t, engine), &racefree.Config{Schema: racefree.SchemaMigrate})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if db.Engine() != engine {
				t.Errorf("Open: engine %s, want %s", db.Engine(), engine)
			}
		})
	}
}

// TestEdgesOpenExistingCreatesNoFile opens a SQLite path that names no
// file: OpenExisting refuses it with ErrNoDatabase and leaves nothing
// there, and once Open made the database, OpenExisting opens it. On
// PostgreSQL it opens as Open does.
func TestEdgesOpenExistingCreatesNoFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "later.db")
	if db, err := dsn.OpenExisting(ctx, "sqlite:"+path, nil); !errors.Is(err, sqlite.ErrNoDatabase) {
		if db != nil {
			db.Close()
		}
		t.Fatalf("OpenExisting of a path with no file: %v, want ErrNoDatabase", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after OpenExisting refused, the path holds something: %v", err)
	}
	db, err := dsn.Open(ctx, "sqlite:"+path, &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = dsn.OpenExisting(ctx, "sqlite:"+path, nil)
	if err != nil {
		t.Fatalf("OpenExisting of the database Open made: %v", err)
	}
	db.Close()
	pg := testdb.NewDSN(t, racefree.Postgres)
	if db, err := dsn.Open(ctx, pg, &racefree.Config{Schema: racefree.SchemaMigrate}); err != nil {
		t.Fatal(err)
	} else {
		db.Close()
	}
	db, err = dsn.OpenExisting(ctx, pg, nil)
	if err != nil {
		t.Fatalf("OpenExisting on PostgreSQL: %v", err)
	}
	defer db.Close()
	if db.Engine() != racefree.Postgres {
		t.Errorf("OpenExisting on PostgreSQL: engine %s", db.Engine())
	}
}
