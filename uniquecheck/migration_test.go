package uniquecheck_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/uniquecheck"
)

func TestFromMigrationPostgres(t *testing.T) {
	t.Parallel()
	const file = `-- 042_unique_email.sql
UPDATE users SET email = trim(email);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS users_email_key
    ON app.users USING btree (lower(email) COLLATE "C" text_pattern_ops DESC NULLS LAST, "Org")
    NULLS NOT DISTINCT WHERE deleted_at IS NULL AND note <> 'a;b';
CREATE INDEX plain ON users (name);
ALTER TABLE users ADD CONSTRAINT users_handle_key UNIQUE (handle, tenant_id),
    ADD COLUMN code text DEFAULT upper('x') NOT NULL UNIQUE,
    ADD COLUMN ref text UNIQUE;
CREATE TABLE fresh (id int);
CREATE UNIQUE INDEX ON fresh (id);
CREATE UNIQUE INDEX u_email ON users (email);
ALTER TABLE users ADD CONSTRAINT users_nick_key UNIQUE NULLS NOT DISTINCT (nick);
`
	specs, warns, err := uniquecheck.FromMigration(racefree.Postgres, file)
	if err != nil {
		t.Fatal(err)
	}
	type short struct {
		Table, Where, Index string
		Keys                []string
		NND, INE            bool
		Source              string
	}
	var got []short
	for _, s := range specs {
		got = append(got, short{s.Table, s.Where, s.IndexName, s.Keys, s.NullsNotDistinct, s.IfNotExists, s.Source})
	}
	want := []short{
		{`"app"."users"`, "deleted_at IS NULL AND note <> 'a;b'", "users_email_key", []string{`lower(email) COLLATE "C"`, `"Org"`}, true, true, "line 3"},
		{`"users"`, "", "users_handle_key", []string{`"handle"`, `"tenant_id"`}, false, false, "line 7"},
		{`"users"`, "", "", []string{`upper('x')`}, false, false, "line 7"},
		{`"users"`, "", "u_email", []string{`email`}, false, false, "line 12"},
		{`"users"`, "", "users_nick_key", []string{`"nick"`}, true, false, "line 13"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("specs:\n got %+v\nwant %+v", got, want)
	}
	all := ""
	for _, w := range warns {
		all += w.String() + "\n"
	}
	for _, sub := range []string{
		"line 7: ADD COLUMN ref UNIQUE: every existing row gets NULL",
		`line 11: "fresh" is created by this migration (line 10)`,
	} {
		if !strings.Contains(all, sub) {
			t.Errorf("warnings lack %q:\n%s", sub, all)
		}
	}
	if got, want := specs[3].Notes, []string{"line 2 updates email, a column of this index, before the index is built: the check sees the values as they are now"}; !reflect.DeepEqual(got, want) {
		t.Errorf("notes of u_email: %q, want %q", got, want)
	}
	if len(specs[0].Notes) != 0 {
		t.Errorf("noted an update of users on app.users: %q", specs[0].Notes)
	}
	if got := specs[2].Notes; len(got) != 1 || !strings.Contains(got[0], "checked as its DEFAULT upper('x')") {
		t.Errorf("notes of ADD COLUMN code: %q", got)
	}
}

func TestFromMigrationSQLite(t *testing.T) {
	t.Parallel()
	const file = "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, `e` TEXT);\n" +
		"CREATE UNIQUE INDEX IF NOT EXISTS main.t_e ON [t] (lower(`e`) COLLATE NOCASE) WHERE e <> '';\n" +
		"CREATE UNIQUE INDEX u2 ON users (CAST(n AS INTEGER), e);\n"
	specs, _, err := uniquecheck.FromMigration(racefree.SQLite, file)
	if err != nil {
		t.Fatal(err)
	}
	// t is created in the file, so only users is checked... and main.t_e is
	// parsed on the way (it is skipped for being new).
	if len(specs) != 1 || !reflect.DeepEqual(specs[0].Keys, []string{"CAST(n AS INTEGER)", "e"}) || specs[0].Table != `"users"` {
		t.Fatalf("specs: %+v", specs)
	}
	specs, _, err = uniquecheck.FromMigration(racefree.SQLite, "CREATE UNIQUE INDEX main.t_e ON [t] (lower(`e`) COLLATE NOCASE) WHERE e <> '';")
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 1 || specs[0].Table != `"main"."t"` || specs[0].Keys[0] != `lower("e") COLLATE NOCASE` || specs[0].Where != "e <> ''" {
		t.Fatalf("specs: %+v", specs)
	}
	if _, _, err := uniquecheck.FromMigration(racefree.Postgres, "CREATE UNIQUE INDEX main.t_e ON t (e);"); !errors.Is(err, racefree.ErrInvalidInput) {
		t.Fatalf("PostgreSQL syntax error: got %v, want ErrInvalidInput", err)
	}
}
