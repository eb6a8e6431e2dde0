package getorcreate

import (
	"testing"

	"github.com/racefree/racefree/internal/sqllex"
)

// TestChangesDataReadsOnlyBareWords checks the lexical judgement of a
// select on the forms each engine quotes: what it finds outside quotes
// and comments, and what it leaves alone inside them, in each reading
// (PostgreSQL, PostgreSQL with standard_conforming_strings off, SQLite);
// changesData answers what the first reading that finds a word finds.
// Where the engines split a text differently, one reading finds the word
// the other hides: the select is refused.
func TestChangesDataReadsOnlyBareWords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sel string
		// what each reading finds: PostgreSQL, with
		// standard_conforming_strings off, SQLite
		pg, off, lite string
	}{
		{"SELECT 1", "", "", ""},
		{"WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "DELETE", "DELETE", "DELETE"},
		{"with x as (select 1) update t set a = 1 returning a", "UPDATE", "UPDATE", "UPDATE"},
		{"WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", "INSERT", "INSERT", "INSERT"},
		{"WITH x AS (SELECT 1) MERGE INTO t USING x ON true WHEN MATCHED THEN DELETE", "MERGE", "MERGE", "MERGE"},
		{"WITH x AS (SELECT 1) replace  into t SELECT * FROM x", "REPLACE INTO", "REPLACE INTO", "REPLACE INTO"},
		{"SELECT replace(a, 'b', 'c') FROM t", "", "", ""},
		{"SELECT a AS replace", "", "", ""},
		{"SELECT a AS replace, 1 AS into_x", "", "", ""},
		{"SELECT 1; SELECT 2", ";", ";", ";"},
		{"SELECT 1;;", ";", ";", ";"},
		{"SELECT 1; 'x'", ";", ";", ";"},
		{"SELECT 1 ;  -- done\n", "", "", ""},
		{"SELECT 1; /* done */", "", "", ""},
		{"SELECT * FROM t FOR UPDATE", "", "", ""},
		{"SELECT * FROM t FOR NO KEY UPDATE SKIP LOCKED", "", "", ""},
		{"SELECT * FROM t FOR UPDATE; UPDATE t SET a = 1", ";", ";", ";"},
		{"SELECT * FROM t WHERE a IN (UPDATE)", "UPDATE", "UPDATE", "UPDATE"},
		{"SELECT 'it''s; delete' FROM t", "", "", ""},
		{`SELECT "delete", "a""update" FROM t`, "", "", ""},
		{"SELECT -- delete\n1", "", "", ""},
		{"SELECT /* update; */ 1", "", "", ""},
		{"SELECT $1, $2 FROM t WHERE a = $1 AND b = 'x'", "", "", ""},
		{"SELECT ?1, :a, @b FROM t WHERE a = ?1 AND b = 'x'", "", "", ""},
		{`SELECT e'\\' , 1 FROM t WHERE a = 'delete'`, "", "", ""},
		{"SELECT a$b FROM t", "", "", ""},
		{"SELECT update_count, deleted FROM t", "", "", ""},
		{"SELECT 1 FROM t WHERE a = 'unterminated delete", "", "", ""},
		{"SELECT 1 /* unterminated delete", "", "", ""},
		{"SELECT 'x' delete", "DELETE", "DELETE", "DELETE"},
		// An identifier quoted as one engine quotes it is a keyword
		// or an operator to the other: "…" is the quote both read.
		{"SELECT `insert` FROM t", "INSERT", "INSERT", ""},
		{"SELECT [update] FROM t", "UPDATE", "UPDATE", ""},
		{"SELECT [email], ARRAY[1, 2], a[1] FROM t", "", "", ""},
		// PostgreSQL: [ is an array's, so its quotes pair up as
		// written; SQLite reads ['a] as an identifier and the quotes
		// pair up the other way.
		{"WITH v AS (SELECT ARRAY['a]', 'b'] AS a), gone AS (DELETE FROM t RETURNING 1) SELECT 'c' FROM v", "DELETE", "DELETE", ""},
		// Block comments nest on PostgreSQL, not on SQLite.
		{"WITH v AS (SELECT 1 /* /* */ ' */ AS a), gone AS (DELETE FROM t RETURNING 1) SELECT 1 -- '", "DELETE", "DELETE", ""},
		{"WITH k AS (SELECT 1 /* /* */ AS a) DELETE FROM t RETURNING a -- */", "", "", "DELETE"},
		{"SELECT a /* outer /* inner */ still */ FROM t", "", "", ""},
		// PostgreSQL ends a -- comment at a carriage return too.
		{"WITH v AS (SELECT 1 AS a) -- x\r, gone AS (DELETE FROM t RETURNING 1) SELECT 1", "DELETE", "DELETE", ""},
		// E'…' continued on the next line escapes there too; SQLite
		// has no E'…'.
		{"WITH v AS (SELECT E'x'\n'\\' ' AS a), gone AS (DELETE FROM t RETURNING 1) SELECT 1", "DELETE", "DELETE", ""},
		{`SELECT E'it\'s; delete' FROM t`, "", "", ";"},
		{`WITH k(e) AS (SELECT e'\' FROM t) DELETE FROM t RETURNING a --'`, "", "", "DELETE"},
		// A backslash ends a standard string, and escapes in one with
		// standard_conforming_strings off.
		{`WITH v AS (SELECT 'x\' AS a, ' AS b), gone AS (DELETE FROM t RETURNING 1) SELECT 1`, "", "DELETE", ""},
		{`SELECT 'C:\' FROM t WHERE a = 'delete'`, "", "DELETE", ""},
		// Dollar quotes are PostgreSQL's; to SQLite $q$ is a parameter.
		{"SELECT $$delete$$, $q$update$q$ FROM t", "", "", ""},
		{"SELECT $tag$ update $tag$ FROM t", "", "", "UPDATE"},
		{"WITH k AS (SELECT ?1 AS e, $q$ AS z) DELETE FROM t RETURNING $q$", "", "", "DELETE"},
		// SQLite's Tcl variables take a quote in their (…).
		{"WITH k AS (SELECT ?1 AS e, $a(') AS z) DELETE FROM t RETURNING a", "", "", "DELETE"},
		{"WITH k AS (SELECT ?1 AS e, :a(') AS z) DELETE FROM t RETURNING a", "", "", "DELETE"},
	} {
		for _, r := range []struct {
			d    sqllex.Dialect
			want string
		}{{sqllex.Postgres, c.pg}, {sqllex.PostgresNonConforming, c.off}, {sqllex.SQLite, c.lite}} {
			if got := changesDataAs(r.d, c.sel); got != r.want {
				t.Errorf("read as %v, changesDataAs(%q) = %q, want %q", r.d, c.sel, got, r.want)
			}
		}
		want, as := c.pg, sqllex.Postgres
		if want == "" {
			want, as = c.off, sqllex.PostgresNonConforming
		}
		if want == "" {
			want, as = c.lite, sqllex.SQLite
		}
		if got, gotAs := changesData(c.sel); got != want || want != "" && gotAs != as {
			t.Errorf("changesData(%q) = %q as %v, want %q as %v", c.sel, got, gotAs, want, as)
		}
	}
}
