package getorcreate

import "testing"

// TestChangesDataReadsOnlyBareWords checks the lexical judgement of a
// select on the forms each engine quotes: what it finds outside quotes
// and comments, and what it leaves alone inside them.
func TestChangesDataReadsOnlyBareWords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ sel, want string }{
		{"SELECT 1", ""},
		{"WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "DELETE"},
		{"with x as (select 1) update t set a = 1 returning a", "UPDATE"},
		{"WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", "INSERT"},
		{"WITH x AS (SELECT 1) MERGE INTO t USING x ON true WHEN MATCHED THEN DELETE", "MERGE"},
		{"WITH x AS (SELECT 1) replace  into t SELECT * FROM x", "REPLACE INTO"},
		{"SELECT replace(a, 'b', 'c') FROM t", ""},
		{"SELECT 1; SELECT 2", ";"},
		{"SELECT 1 ;  -- done\n", ""},
		{"SELECT * FROM t FOR UPDATE", ""},
		{"SELECT * FROM t FOR NO KEY UPDATE SKIP LOCKED", ""},
		{"SELECT * FROM t FOR UPDATE; UPDATE t SET a = 1", ";"},
		{"SELECT 'it''s; delete' FROM t", ""},
		{`SELECT "delete", "a""update" FROM t`, ""},
		{"SELECT `insert`, [update] FROM t", ""},
		{"SELECT -- delete\n1", ""},
		{"SELECT /* update; */ 1", ""},
		{"SELECT $$delete$$, $tag$ update $tag$ FROM t", ""},
		{"SELECT $1, $2 FROM t WHERE a = $1 AND b = 'x'", ""},
		{`SELECT E'it\'s; delete' FROM t`, ""},
		{`SELECT e'\\' , 1 FROM t WHERE a = 'delete'`, ""},
		{"SELECT a$b FROM t", ""},
		{"SELECT update_count, deleted FROM t", ""},
		{"SELECT 1 FROM t WHERE a = 'unterminated delete", ""},
		{"SELECT 1 /* unterminated delete", ""},
		{"SELECT 'x' delete", "DELETE"},
	} {
		if got := changesData(c.sel); got != c.want {
			t.Errorf("changesData(%q) = %q, want %q", c.sel, got, c.want)
		}
	}
}
