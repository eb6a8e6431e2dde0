package ident_test

import (
	"context"
	"errors"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/ident"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestEdges2QuoteDoublesEveryQuote holds Quote's escaping for names with
// more than one double quote, on both engines: every double quote is
// doubled, so the name stays one identifier and the engine creates a
// table of exactly that name. A quote left single would close the
// quoting early and make the rest of the name SQL.
func TestEdges2QuoteDoublesEveryQuote(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		`a"b"c`:        `"a""b""c"`,
		`""`:           `""""""`,
		`x" (id int);`: `"x"" (id int);"`,
	} {
		if got, err := ident.Quote(name); err != nil || got != want {
			t.Errorf("Quote(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		catalogue := `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`
		if db.Engine() == racefree.Postgres {
			catalogue = `SELECT count(*) FROM pg_class WHERE relname = $1 AND relnamespace = current_schema()::regnamespace`
		}
		for _, name := range []string{`a"b"c`, `"q"`, `x"y"z"w`} {
			q, err := ident.Quote(name)
			if err != nil {
				t.Fatalf("Quote(%q): %v", name, err)
			}
			if _, err := db.ExecContext(ctx, `CREATE TABLE `+q+` (id integer)`); err != nil {
				t.Fatalf("CREATE TABLE %s: %v", q, err)
			}
			var n int
			if err := db.QueryRowContext(ctx, catalogue, name).Scan(&n); err != nil || n != 1 {
				t.Errorf("%d tables named %q after CREATE TABLE %s (%v), want 1", n, name, q, err)
			}
		}
	})
}

// TestEdges2QuoteRefusesAControlCharacterAnywhere holds Quote's refusal
// of control characters at the ends of a name as in its middle: a name
// starting or ending with NUL, a newline, 0x1f or DEL is an InputError,
// and so is a name that is only one.
func TestEdges2QuoteRefusesAControlCharacterAnywhere(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"\x00", "\n", "\x1f", "\x7f"} {
		for _, name := range []string{c + "ab", "ab" + c, c} {
			if q, err := ident.Quote(name); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Quote(%q) = %q, %v; want an InputError", name, q, err)
			}
		}
	}
}
