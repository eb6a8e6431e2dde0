package roles_test

import (
	"context"
	"database/sql"
	"net/url"
	"slices"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/roles"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// emulate16 makes, in the test's schema, what reach16.sql reads of
// PostgreSQL 16 on an older server: pg_auth_members with set_option and
// inherit_option (read from the table options, else SET TRUE and INHERIT
// as the member's rolinherit, which is what PostgreSQL 16 grants by
// default), and pg_has_role with 'SET' and 'USAGE' following those
// options along every chain, as PostgreSQL 16 documents them. With the
// schema before pg_catalog in search_path they hide the catalogue's own.
const emulate16 = `
CREATE TABLE options (roleid oid, member oid, set_option bool, inherit_option bool);
CREATE VIEW pg_auth_members AS
SELECT m.roleid, m.member, m.grantor, m.admin_option,
       COALESCE(o.inherit_option, r.rolinherit) AS inherit_option,
       COALESCE(o.set_option, true) AS set_option
  FROM pg_catalog.pg_auth_members m
  JOIN pg_catalog.pg_roles r ON r.oid = m.member
  LEFT JOIN options o ON o.roleid = m.roleid AND o.member = m.member;
CREATE FUNCTION pg_has_role(a oid, b oid, priv text) RETURNS bool LANGUAGE sql STABLE AS $$
  WITH RECURSIVE w(r) AS (
      SELECT a
      UNION
      SELECT m.roleid FROM w JOIN pg_auth_members m ON m.member = w.r
       WHERE CASE upper(priv) WHEN 'SET' THEN m.set_option WHEN 'USAGE' THEN m.inherit_option ELSE true END)
  SELECT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE oid = a) OR b IN (SELECT r FROM w)
$$;`

// TestReach16OnEmulatedCatalogue runs the PostgreSQL 16 query (which this
// project's PostgreSQL 15 cannot run on its own catalogue) against the
// emulation above: with every grant SET TRUE it finds what reach.sql
// finds; a member WITH SET FALSE of a BYPASSRLS role or a superuser role
// escapes nothing; a member WITH SET FALSE, INHERIT TRUE of the owner
// still has the owner's privileges; a chain with one SET FALSE link does
// not lead to SET ROLE. It proves the SQL and its reading, not
// PostgreSQL 16 itself.
func TestReach16OnEmulatedCatalogue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, owner := openEmulated16(t, "")
	rs := testdb.MakeEscapeRoles(t, owner)
	for _, e := range rs.Escapes {
		want, err := roles.JudgeWith(ctx, db, *roles.ReachSQL, e.Role, []string{owner})
		if err != nil {
			t.Fatal(err)
		}
		got, err := roles.JudgeWith(ctx, db, *roles.Reach16, e.Role, []string{owner})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || len(want) != 1 || got[0].String() != want[0].String() || !slices.Equal(got[0].Path, e.Path) {
			t.Errorf("%s: 16 finds %+v, 15 finds %+v", e.Name, got, want)
		}
	}
	if got, err := roles.JudgeWith(ctx, db, *roles.Reach16, rs.Clean, []string{owner}); err != nil || len(got) != 0 {
		t.Errorf("clean: %+v %v", got, err)
	}
	// SET FALSE on the first grant of each escape.
	set := func(e int, setOpt, inherit bool) {
		t.Helper()
		p := rs.Escapes[e].Path
		if _, err := db.ExecContext(ctx, `INSERT INTO options SELECT to_regrole($1), to_regrole($2), $3, $4`, p[1], p[0], setOpt, inherit); err != nil {
			t.Fatal(err)
		}
	}
	set(0, false, true)  // member of BYPASSRLS: inherits, cannot SET ROLE
	set(1, false, true)  // member of the owner: inherits its privileges
	set(2, false, false) // member of the superuser role: nothing
	set(3, false, true)  // the chain's first link
	for i, want := range []struct {
		n        int
		inherits bool
	}{{0, false}, {1, true}, {0, false}, {0, false}} {
		e := rs.Escapes[i]
		got, err := roles.JudgeWith(ctx, db, *roles.Reach16, e.Role, []string{owner})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want.n || (want.n == 1 && (got[0].SetRole || !got[0].Inherits || got[0].Kind != e.Kind || !slices.Equal(got[0].Path, e.Path))) {
			t.Errorf("%s WITH SET FALSE: %+v, want %d finding(s), inherited", e.Name, got, want.n)
		}
	}
}

// TestJudgeChoosesTheQueryByServerVersion: Judge reads PostgreSQL 16's
// catalogue from server_version_num 160000 on, and the older one below
// it. On the emulated catalogue, with current_setting made to answer a
// chosen server_version_num, a member WITH SET FALSE of a BYPASSRLS role
// escapes nothing at exactly 160000 (the SET option is read) and is a
// BYPASSRLS finding at 159999 (before 16 every membership allows SET
// ROLE).
func TestJudgeChoosesTheQueryByServerVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, owner := openEmulated16(t, `
CREATE TABLE version (num text);
CREATE FUNCTION current_setting(name text) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN name = 'server_version_num' THEN (SELECT num FROM version) ELSE pg_catalog.current_setting(name) END
$$;`)
	rs := testdb.MakeEscapeRoles(t, owner)
	e := rs.Escapes[0] // a member of a BYPASSRLS role
	if e.Kind != roles.BypassRLS {
		t.Fatalf("escape 0 is %s, want a member of a BYPASSRLS role", e.Kind)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO options SELECT to_regrole($1), to_regrole($2), false, false`, e.Path[1], e.Path[0]); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		version string
		n       int
	}{{"159999", 1}, {"160000", 0}, {"160001", 0}} {
		if _, err := db.ExecContext(ctx, `DELETE FROM version; INSERT INTO version VALUES ('`+c.version+`')`); err != nil {
			t.Fatal(err)
		}
		got, err := roles.Judge(ctx, db, e.Role, []string{owner})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != c.n || (c.n == 1 && got[0].Kind != roles.BypassRLS) {
			t.Errorf("server_version_num %s: %+v, want %d BYPASSRLS finding(s)", c.version, got, c.n)
		}
	}
}

// openEmulated16 opens a fresh PostgreSQL database whose search path puts
// its own schema ahead of pg_catalog, creates the emulated PostgreSQL 16
// catalogue there (emulate16) and then extra, and makes a NOLOGIN role to
// own racefree's tables, dropped at the end of the test.
func openEmulated16(t *testing.T, extra string) (db *sql.DB, owner string) {
	t.Helper()
	ctx := context.Background()
	u, _ := url.Parse(testdb.NewDSN(t, racefree.Postgres))
	schema := u.Query().Get("search_path")
	q := u.Query()
	q.Set("search_path", schema+",pg_catalog")
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.ExecContext(ctx, emulate16+extra); err != nil {
		t.Fatal(err)
	}
	owner = schema + "_owner"
	if _, err := db.ExecContext(ctx, `CREATE ROLE `+owner+` NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP ROLE `+owner) })
	return db, owner
}
