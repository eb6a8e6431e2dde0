package ident_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/ident"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestEdgesQuoteAtItsBounds holds Quote's bounds on both engines. A
// name of 63 bytes (PostgreSQL's limit, in ASCII or in two-byte
// characters), one with a double quote in it, and one with the first
// and last printable ASCII bytes (a space and ~) are quoted so that the
// engine creates a table of exactly that name. A name of 64 bytes is an
// InputError: PostgreSQL would cut it to its first 63 and so name
// another table (shown by reading the 63-byte table through it). A name
// holding NUL, 0x1f or DEL (0x7f), and the empty name, are InputErrors,
// though PostgreSQL holds a table named with DEL.
func TestEdgesQuoteAtItsBounds(t *testing.T) {
	t.Parallel()
	accepted := []string{
		strings.Repeat("a", 62) + `"`,
		strings.Repeat("é", 31) + "x",
		" ~",
	}
	refused := []string{
		"",
		strings.Repeat("a", 64),
		strings.Repeat("é", 32),
		"a\x00b",
		"a\x1fb",
		"a\x7fb",
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		catalogue := `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`
		if db.Engine() == racefree.Postgres {
			catalogue = `SELECT count(*) FROM pg_class WHERE relname = $1 AND relnamespace = current_schema()::regnamespace`
		}
		for _, name := range accepted {
			q, err := ident.Quote(name)
			if err != nil {
				t.Fatalf("Quote(%q) = %v, want it quoted", name, err)
			}
			if _, err := db.ExecContext(ctx, `CREATE TABLE `+q+` (id integer)`); err != nil {
				t.Fatalf("CREATE TABLE %s: %v", q, err)
			}
			var n int
			if err := db.QueryRowContext(ctx, catalogue, name).Scan(&n); err != nil || n != 1 {
				t.Errorf("%d tables named %q after CREATE TABLE %s (%v), want 1", n, name, q, err)
			}
		}
		for _, name := range refused {
			if q, err := ident.Quote(name); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Quote(%q) = %q, %v; want an InputError", name, q, err)
			}
		}
		if db.Engine() != racefree.Postgres {
			return
		}
		// Why 64 bytes must be refused: PostgreSQL reads a quoted name
		// of 64 bytes as its first 63, another table.
		long := strings.Repeat("a", 62) + `"` + "x"
		if _, err := db.ExecContext(ctx, `SELECT id FROM "`+strings.ReplaceAll(long, `"`, `""`)+`"`); err != nil {
			t.Fatalf("PostgreSQL no longer cuts a 64-byte name to 63 (%v): the bound can move", err)
		}
		if _, err := db.ExecContext(ctx, "CREATE TABLE \"a\x7fb\" (id integer)"); err != nil {
			t.Fatalf("PostgreSQL refuses a table named with DEL: %v", err)
		}
	})
}
