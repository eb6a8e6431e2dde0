package roles_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/roles"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// guarded is a schema of its own with one table, guarded by a forced
// tenant policy and owned by a NOLOGIN role of its own, holding one row of
// tenant a and one of tenant b.
type guarded struct {
	admin  *sql.DB
	dsn    string
	schema string
	owner  string
	roles  *testdb.EscapeRoles
}

func setup(t *testing.T) *guarded {
	t.Helper()
	return setupOn(t, testdb.NewDSN(t, racefree.Postgres))
}

// setupOn is setup on dsn, a fresh PostgreSQL database of the test.
func setupOn(t *testing.T, dsn string) *guarded {
	t.Helper()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	u, _ := url.Parse(dsn)
	g := &guarded{admin: admin, dsn: dsn, schema: u.Query().Get("search_path")}
	g.owner = g.schema + "_owner"
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, `CREATE ROLE `+g.owner+` NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), `DROP OWNED BY `+g.owner)
		if _, err := admin.ExecContext(context.Background(), `DROP ROLE `+g.owner); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	g.roles = testdb.MakeEscapeRoles(t, g.owner)
	logins := []string{g.roles.Clean, g.roles.Bypass, g.roles.Super}
	for _, e := range g.roles.Escapes {
		logins = append(logins, e.Role)
	}
	if _, err := admin.ExecContext(ctx, `
CREATE TABLE notes (tenant_id text NOT NULL, body text);
INSERT INTO notes VALUES ('a', 'of a'), ('b', 'of b');
ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
ALTER TABLE notes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON notes USING (tenant_id = NULLIF(current_setting('racefree.tenant_id', true), ''));
ALTER TABLE notes OWNER TO `+g.owner+`;
GRANT USAGE ON SCHEMA `+g.schema+` TO `+strings.Join(append(logins, g.owner), ", ")+`;
GRANT SELECT ON notes TO `+strings.Join(logins, ", ")); err != nil {
		t.Fatal(err)
	}
	return g
}

// as opens the test's database logged in as role.
func (g *guarded) as(t *testing.T, role string) *sql.DB {
	t.Helper()
	u, _ := url.Parse(g.dsn)
	u.User = url.User(role)
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// readsOtherTenant logs in as role, SETs ROLE to reached (when not
// empty), and counts the rows it reads with tenant a set: 1 when
// row-level security binds it, 2 when it reads tenant b's row too. For
// an owner it first disables the table's row-level security, as an owner
// may. It all rolls back.
func (g *guarded) readsOtherTenant(t *testing.T, role, reached string, owner bool) (int, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := g.as(t, role).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT set_config('racefree.tenant_id', 'a', true)`); err != nil {
		t.Fatal(err)
	}
	if reached != "" {
		if _, err := tx.ExecContext(ctx, `SET LOCAL ROLE `+reached); err != nil {
			return 0, err
		}
	}
	if owner {
		if _, err := tx.ExecContext(ctx, `ALTER TABLE notes DISABLE ROW LEVEL SECURITY`); err != nil {
			return 0, err
		}
	}
	var n int
	err = tx.QueryRowContext(ctx, `SELECT count(*) FROM notes`).Scan(&n)
	return n, err
}

// TestJudgeFollowsMemberships: each escape of issue 24 (a member of a
// BYPASSRLS role, a NOINHERIT member of the owner, a member of a
// superuser role, a chain of two memberships) is found with its path
// (its line naming the middle roles of a chain, and none of a direct
// membership),
// and is real: after SET ROLE to the reached role the login role reads
// the other tenant's row. The clean role is clean, and cannot.
func TestJudgeFollowsMemberships(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	for _, e := range g.roles.Escapes {
		t.Run(e.Name, func(t *testing.T) {
			fs, err := roles.Judge(ctx, g.admin, e.Role, []string{g.owner})
			if err != nil {
				t.Fatal(err)
			}
			if len(fs) != 1 || fs[0].Kind != e.Kind || fs[0].Target != e.Reached || !slices.Equal(fs[0].Path, e.Path) || !fs[0].SetRole || fs[0].Self() {
				t.Fatalf("Judge(%s) = %+v, want one %s finding reaching %s by %v", e.Role, fs, e.Kind, e.Reached, e.Path)
			}
			// The whole line: the path's middle roles (none for a direct
			// membership, not the target) named once each.
			through := ""
			if len(e.Path) > 2 {
				through = ` (through "` + strings.Join(e.Path[1:len(e.Path)-1], `", "`) + `")`
			}
			what := map[roles.Kind]string{roles.Superuser: "is a superuser", roles.BypassRLS: "has BYPASSRLS", roles.Owner: "owns the tables"}[e.Kind]
			if s, want := fs[0].String(), `"`+e.Role+`" can SET ROLE to "`+e.Reached+`"`+through+`, which `+what; s != want {
				t.Errorf("String() = %q, want %q", s, want)
			}
			if got, want := fs[0].Revoke(), `REVOKE "`+e.Path[1]+`" FROM "`+e.Role+`";`; got != want {
				t.Errorf("Revoke() = %q, want %q", got, want)
			}
			// The evidence: bound by row-level security as itself, it
			// reads every tenant after one SET ROLE.
			if n, err := g.readsOtherTenant(t, e.Role, "", false); err != nil || n != 1 {
				t.Fatalf("as itself: %d rows (%v), want 1", n, err)
			}
			if n, err := g.readsOtherTenant(t, e.Role, e.Reached, e.Kind == roles.Owner); err != nil || n != 2 {
				t.Fatalf("after SET ROLE %s: %d rows (%v), want 2", e.Reached, n, err)
			}
		})
	}
	t.Run("clean", func(t *testing.T) {
		fs, err := roles.Judge(ctx, g.admin, g.roles.Clean, []string{g.owner})
		if err != nil || len(fs) != 0 {
			t.Fatalf("Judge(clean) = %+v, %v; want nothing", fs, err)
		}
		if n, err := g.readsOtherTenant(t, g.roles.Clean, "", false); err != nil || n != 1 {
			t.Fatalf("clean: %d rows (%v), want 1", n, err)
		}
		for _, r := range []string{g.owner, g.roles.Bypass, g.roles.Super} {
			if _, err := g.readsOtherTenant(t, g.roles.Clean, r, false); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Fatalf("clean SET ROLE %s: %v, want permission denied", r, err)
			}
		}
	})
}

// TestJudgeTheRoleItself: the role's own attributes and ownership, and
// the privileges it inherits from the owner without SET ROLE; a
// superuser's own CREATEROLE is no finding of its own.
func TestJudgeTheRoleItself(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	p := g.schema + "_"
	testdb.ExecAll(t, g.admin,
		`CREATE ROLE `+p+`bypass BYPASSRLS`,
		`CREATE ROLE `+p+`super SUPERUSER NOBYPASSRLS IN ROLE `+g.roles.Bypass,
		`CREATE ROLE `+p+`both SUPERUSER BYPASSRLS`,
		`CREATE ROLE `+p+`supercr SUPERUSER CREATEROLE NOBYPASSRLS`,
		`CREATE ROLE `+p+`inherit INHERIT IN ROLE `+g.owner,
	)
	t.Cleanup(func() {
		for _, r := range []string{"bypass", "inherit", "super", "both", "supercr"} {
			_, _ = g.admin.ExecContext(context.Background(), `DROP ROLE `+p+r)
		}
	})
	for _, c := range []struct {
		role     string
		kinds    []roles.Kind
		self     bool
		inherits bool
		says     string
	}{
		// A superuser is every role's member: only its own attributes count.
		{p + "super", []roles.Kind{roles.Superuser}, true, true, `is a superuser`},
		{p + "both", []roles.Kind{roles.Superuser, roles.BypassRLS}, true, true, `is a superuser`},
		// Its CREATEROLE adds nothing to a superuser: no second finding.
		{p + "supercr", []roles.Kind{roles.Superuser}, true, true, `is a superuser`},
		{p + "bypass", []roles.Kind{roles.BypassRLS}, true, true, `has BYPASSRLS`},
		{g.owner, []roles.Kind{roles.Owner}, true, true, `owns the tables`},
		{p + "inherit", []roles.Kind{roles.Owner}, false, true, `has, without SET ROLE, the privileges of "` + g.owner + `"`},
	} {
		fs, err := roles.Judge(ctx, g.admin, c.role, []string{g.owner})
		if err != nil {
			t.Fatal(err)
		}
		var kinds []roles.Kind
		for _, f := range fs {
			kinds = append(kinds, f.Kind)
		}
		if !slices.Equal(kinds, c.kinds) || fs[0].Self() != c.self || fs[0].Inherits != c.inherits || !strings.Contains(fs[0].String(), c.says) {
			t.Errorf("Judge(%s) = %+v (%q), want %v, self %v, inherits %v, saying %q", c.role, fs, fs[0].String(), c.kinds, c.self, c.inherits, c.says)
		}
	}
	if _, err := roles.Judge(ctx, g.admin, p+"no_such_role", nil); !errors.Is(err, roles.ErrNoRole) {
		t.Errorf("an unknown role: %v, want ErrNoRole", err)
	}
}

// TestJudgeOrdersFindingsByKind: a role that reaches an owner and a
// BYPASSRLS role gets the BYPASSRLS finding first even when the owner's
// name sorts first (the catalogue query orders by name; Judge by kind).
func TestJudgeOrdersFindingsByKind(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	p := g.schema + "_"
	testdb.ExecAll(t, g.admin,
		`CREATE ROLE `+p+`a_owner NOLOGIN`,
		`CREATE ROLE `+p+`b_bypass NOLOGIN BYPASSRLS`,
		`CREATE ROLE `+p+`member NOLOGIN INHERIT IN ROLE `+p+`a_owner, `+p+`b_bypass`,
	)
	t.Cleanup(func() {
		for _, r := range []string{"member", "a_owner", "b_bypass"} {
			_, _ = g.admin.ExecContext(context.Background(), `DROP ROLE `+p+r)
		}
	})
	fs, err := roles.Judge(ctx, g.admin, p+"member", []string{p + "a_owner"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fs {
		got = append(got, string(f.Kind)+":"+f.Target)
	}
	if want := []string{"bypassrls:" + p + "b_bypass", "owner:" + p + "a_owner"}; !slices.Equal(got, want) {
		t.Fatalf("Judge = %v, want %v", got, want)
	}
}

// TestJudgeCreateRoleAndServerFiles: a role with CREATEROLE, and one that
// can SET ROLE (NOINHERIT) to a role with it, is a CreateRole finding; a
// member of pg_read_server_files (inheriting its rights), a NOINHERIT
// member of pg_write_server_files and a NOINHERIT member of a role that
// is a member of pg_execute_server_program are ServerFiles findings, each
// with its path. The CREATEROLE role's escape is real: it grants itself
// the owner, SETs ROLE to it, disables the table's row-level security and
// reads the other tenant's row. The emulated PostgreSQL 16 catalogue
// finds the same, and nothing once the grant to the CREATEROLE role is
// WITH SET FALSE.
func TestJudgeCreateRoleAndServerFiles(t *testing.T) {
	t.Parallel()
	g := setup(t)
	ctx := context.Background()
	p := g.schema + "_"
	testdb.ExecAll(t, g.admin,
		`CREATE ROLE `+p+`cr LOGIN CREATEROLE`,
		`CREATE ROLE `+p+`crgroup NOLOGIN CREATEROLE`,
		`CREATE ROLE `+p+`crvia LOGIN NOINHERIT IN ROLE `+p+`crgroup`,
		`CREATE ROLE `+p+`files LOGIN INHERIT IN ROLE pg_read_server_files`,
		`CREATE ROLE `+p+`write LOGIN NOINHERIT IN ROLE pg_write_server_files`,
		`CREATE ROLE `+p+`mid NOLOGIN IN ROLE pg_execute_server_program`,
		`CREATE ROLE `+p+`prog LOGIN NOINHERIT IN ROLE `+p+`mid`,
		`GRANT USAGE ON SCHEMA `+g.schema+` TO `+p+`cr`,
		`GRANT SELECT ON notes TO `+p+`cr`,
	)
	t.Cleanup(func() {
		for _, r := range []string{"cr", "crvia", "crgroup", "files", "write", "prog", "mid"} {
			_, _ = g.admin.ExecContext(context.Background(), `DROP OWNED BY `+p+r)
			if _, err := g.admin.ExecContext(context.Background(), `DROP ROLE `+p+r); err != nil {
				t.Errorf("drop role: %v", err)
			}
		}
	})
	cases := []struct {
		role     string
		kind     roles.Kind
		path     []string
		inherits bool
		says     string
	}{
		{p + "cr", roles.CreateRole, []string{p + "cr"}, true, `"` + p + `cr" has CREATEROLE`},
		{p + "crvia", roles.CreateRole, []string{p + "crvia", p + "crgroup"}, false, `"` + p + `crvia" can SET ROLE to "` + p + `crgroup", which has CREATEROLE`},
		{p + "files", roles.ServerFiles, []string{p + "files", "pg_read_server_files"}, true, `"` + p + `files" has, without SET ROLE, the privileges of "pg_read_server_files", which reads the server's files`},
		{p + "write", roles.ServerFiles, []string{p + "write", "pg_write_server_files"}, false, `"` + p + `write" can SET ROLE to "pg_write_server_files", which writes the server's files`},
		{p + "prog", roles.ServerFiles, []string{p + "prog", p + "mid", "pg_execute_server_program"}, false, `"` + p + `prog" can SET ROLE to "pg_execute_server_program" (through "` + p + `mid"), which runs programs on the server`},
	}
	for _, c := range cases {
		fs, err := roles.Judge(ctx, g.admin, c.role, []string{g.owner})
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 1 || fs[0].Kind != c.kind || !slices.Equal(fs[0].Path, c.path) || fs[0].Inherits != c.inherits || !fs[0].SetRole || fs[0].String() != c.says {
			t.Errorf("Judge(%s) = %+v, want one %s finding by %v (inherits %v) saying %q", c.role, fs, c.kind, c.path, c.inherits, c.says)
		}
	}

	// The evidence: the CREATEROLE role, bound as itself, grants itself
	// the owner and reads every tenant (PostgreSQL 15; from 16 CREATEROLE
	// administers only the roles it created, and the grant is refused).
	tx, err := g.as(t, p+"cr").BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var version, n int
	if err := tx.QueryRowContext(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 160000 {
		for _, q := range []string{
			`SELECT set_config('racefree.tenant_id', 'a', true)`,
			`GRANT ` + g.owner + ` TO ` + p + `cr`,
			`SET LOCAL ROLE ` + g.owner,
			`ALTER TABLE notes DISABLE ROW LEVEL SECURITY`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM notes`).Scan(&n); err != nil || n != 2 {
			t.Fatalf("after granting itself the owner: %d rows (%v), want 2", n, err)
		}
	}
	_ = tx.Rollback()

	// PostgreSQL 16's query on the emulated catalogue: the same findings;
	// a grant WITH SET FALSE of the CREATEROLE role leads nowhere (an
	// attribute comes by SET ROLE only), one of pg_write_server_files
	// WITH SET FALSE, INHERIT TRUE still gives its rights.
	db, _ := openEmulated16(t, "")
	for _, c := range cases {
		fs, err := roles.JudgeWith(ctx, db, *roles.Reach16, c.role, []string{g.owner})
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 1 || fs[0].String() != c.says || !slices.Equal(fs[0].Path, c.path) {
			t.Errorf("16: Judge(%s) = %+v, want %q", c.role, fs, c.says)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO options SELECT to_regrole($1), to_regrole($2), false, true`, p+"crgroup", p+"crvia"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO options SELECT to_regrole($1), to_regrole($2), false, true`, "pg_write_server_files", p+"write"); err != nil {
		t.Fatal(err)
	}
	if fs, err := roles.JudgeWith(ctx, db, *roles.Reach16, p+"crvia", []string{g.owner}); err != nil || len(fs) != 0 {
		t.Errorf("16: CREATEROLE role granted WITH SET FALSE: %+v %v, want nothing", fs, err)
	}
	if fs, err := roles.JudgeWith(ctx, db, *roles.Reach16, p+"write", []string{g.owner}); err != nil || len(fs) != 1 || fs[0].Kind != roles.ServerFiles || fs[0].SetRole || !fs[0].Inherits {
		t.Errorf("16: pg_write_server_files WITH SET FALSE, INHERIT TRUE: %+v %v, want one inherited finding", fs, err)
	}
}
