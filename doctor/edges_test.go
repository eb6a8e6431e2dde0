package doctor_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestPostgresRLSVerdictAtTheSchemaEdges tries the row-level security
// check at the versions that decide it: a database never migrated
// (version 0) is schema-behind with no row-level security verdict (not
// rls-not-judged: the version is known); at exactly version 12, the
// migration that forces row-level security, a table that no longer
// forces it is rls-not-forced; and a role that may not read the schema
// version gets schema-not-judged and rls-not-judged, never silence.
func TestPostgresRLSVerdictAtTheSchemaEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	db, err := dsn.Open(ctx, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	rep := check(t, db, doctor.Options{})
	f := want(t, rep, doctor.SchemaBehind, doctor.Warn)
	if !strings.Contains(f.Detail, "version 0") {
		t.Fatalf("detail %q does not name version 0", f.Detail)
	}
	none(t, rep, doctor.RLSNotForced, doctor.RLSNotJudged, doctor.SchemaNotJudged)

	if _, err := db.MigrateUpTo(ctx, 12); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL().ExecContext(ctx, `ALTER TABLE racefree_claims NO FORCE ROW LEVEL SECURITY`); err != nil {
		t.Fatal(err)
	}
	f = want(t, check(t, db, doctor.Options{}), doctor.RLSNotForced, doctor.Error)
	if !strings.Contains(f.Detail, "racefree_claims") {
		t.Fatalf("detail %q does not name the table", f.Detail)
	}
	if _, err := db.SQL().ExecContext(ctx, f.Fix); err != nil {
		t.Fatalf("fix %q: %v", f.Fix, err)
	}
	if _, err := db.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}

	app := testdb.App(t, db, d)
	var role string
	if err := app.SQL().QueryRowContext(ctx, `SELECT current_user`).Scan(&role); err != nil {
		t.Fatal(err)
	}
	none(t, check(t, app, doctor.Options{}), doctor.SchemaNotJudged, doctor.RLSNotJudged, doctor.RLSNotForced)
	if _, err := db.SQL().ExecContext(ctx, `REVOKE SELECT ON racefree_schema_migrations FROM `+role); err != nil {
		t.Fatal(err)
	}
	rep = check(t, app, doctor.Options{})
	want(t, rep, doctor.SchemaNotJudged, doctor.Warn)
	want(t, rep, doctor.RLSNotJudged, doctor.Warn)
}

// TestPostgresRoleFindingFixes: a role finding's fix cuts the path when
// there is one (a member of a superuser role: REVOKE the membership) and
// names the way out when the role itself escapes (a superuser: serve as
// a role that migrate up --app-role accepts).
func TestPostgresRoleFindingFixes(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	u, _ := url.Parse(d)
	p := u.Query().Get("search_path")
	super, member := p+"_super", p+"_member"
	admin, err := sql.Open("pgx", d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	testdb.ExecAll(t, admin,
		`CREATE ROLE `+super+` NOLOGIN SUPERUSER`,
		`CREATE ROLE `+member+` NOLOGIN NOSUPERUSER NOBYPASSRLS`,
		`GRANT `+super+` TO `+member,
	)
	t.Cleanup(func() {
		for _, r := range []string{member, super} {
			if _, err := admin.ExecContext(context.Background(), `DROP ROLE `+r); err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		}
	})
	f := want(t, check(t, owner, doctor.Options{Role: member}), "role-is-superuser", doctor.Error)
	if want := `REVOKE "` + super + `" FROM "` + member + `";`; f.Fix != want {
		t.Fatalf("fix of a member of a superuser role: %q, want %q", f.Fix, want)
	}
	f = want(t, check(t, owner, doctor.Options{}), "role-is-superuser", doctor.Error)
	if !strings.Contains(f.Fix, "--app-role") {
		t.Fatalf("fix of a superuser itself: %q, want it to name migrate up --app-role", f.Fix)
	}
}

// TestEdgesRoleNotJudgedWhenItsQueryFails: when the role judgement's
// catalogue query fails (pg_has_role, shadowed for the application
// role's connections by a function that raises, ahead of pg_catalog in
// their search path), doctor reports role-not-judged, a warning naming
// the cause, and the report fails: a role it could not judge is never
// silence. The same role, clean (TestPostgresAppRoleIsClean), passes once
// the query works again.
func TestEdgesRoleNotJudgedWhenItsQueryFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	u, err := url.Parse(testdb.AppDSN(t, owner, d))
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	q := u.Query()
	q.Set("search_path", schema+",pg_catalog")
	u.RawQuery = q.Encode()
	app, err := dsn.Open(ctx, u.String(), &racefree.Config{Schema: racefree.SchemaAllowOutdated})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	testdb.ExecAll(t, owner, `CREATE FUNCTION `+schema+`.pg_has_role(a oid, b oid, priv text) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the catalogue cannot be read (test)';
END $$`)
	rep := check(t, app, doctor.Options{})
	f := want(t, rep, doctor.RoleNotJudged, doctor.Warn)
	if !strings.Contains(f.Detail, "the catalogue cannot be read") {
		t.Errorf("detail %q does not say why", f.Detail)
	}
	if !rep.Failed() {
		t.Errorf("a role not judged passes: %v", rep.Findings)
	}
	testdb.ExecAll(t, owner, `DROP FUNCTION `+schema+`.pg_has_role(oid, oid, text)`)
	if rep := check(t, app, doctor.Options{}); rep.Failed() {
		t.Fatalf("the application role, judged again: %v", rep.Findings)
	}
}

// TestSchemaBehindByOneVersion tries schema-behind at its edge on both
// engines: a schema exactly one version behind the binary's is
// schema-behind (a warning) naming that version, and at the binary's
// own version there is no schema finding at all.
func TestSchemaBehindByOneVersion(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db, err := dsn.Open(ctx, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		code, err := db.CodeVersion()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.MigrateUpTo(ctx, code-1); err != nil {
			t.Fatal(err)
		}
		f := want(t, check(t, db, doctor.Options{}), doctor.SchemaBehind, doctor.Warn)
		if behind := fmt.Sprintf("version %d", code-1); !strings.Contains(f.Detail, behind) {
			t.Fatalf("detail %q does not name %s", f.Detail, behind)
		}
		if _, err := db.MigrateUpTo(ctx, code); err != nil {
			t.Fatal(err)
		}
		none(t, check(t, db, doctor.Options{}), doctor.SchemaBehind, doctor.SchemaAhead, doctor.SchemaNotJudged)
	})
}

// TestPostgresNeverAnalyzedFromOneRow tries never-analyzed at its edge:
// once the statistics count the rows the migrations wrote (the schema
// version's, the default tenant's), racefree_claims, holding none, is not
// named; one claim in it, never analyzed, and never-analyzed names it.
func TestPostgresNeverAnalyzedFromOneRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	names := func(table string) func(doctor.Report) bool {
		return func(r doctor.Report) bool {
			f, ok := find(r, doctor.NeverAnalyzed)
			return ok && strings.Contains(f.Detail, table)
		}
	}
	rep := waitFor(t, owner, doctor.Options{}, "never-analyzed of the migrations' rows", names("racefree_schema_migrations"))
	if f, _ := find(rep, doctor.NeverAnalyzed); strings.Contains(f.Detail, "racefree_claims") {
		t.Fatalf("racefree_claims holds no row and is named: %q", f.Detail)
	}
	if _, err := claim.New(owner).Acquire(ctx, owner, "doctor-one", "worker-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	rep = waitFor(t, owner, doctor.Options{}, "never-analyzed of one claim", names("racefree_claims"))
	want(t, rep, doctor.NeverAnalyzed, doctor.Info)
}

// TestPostgresSynchronousCommitAtItsEdge tries synchronous-commit-off at
// the edge of synchronous_commit's levels: off, the one that acknowledges
// a commit before it is on disk, is the warning; local, the next level
// (flushed on this server, waiting for no standby), is not.
func TestPostgresSynchronousCommitAtItsEdge(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	off := testdb.Open(t, d+"&synchronous_commit=off", nil)
	local := testdb.Open(t, d+"&synchronous_commit=local", nil)
	want(t, check(t, off, doctor.Options{}), doctor.SynchronousCommitOff, doctor.Warn)
	none(t, check(t, local, doctor.Options{}), doctor.SynchronousCommitOff, doctor.SettingsNotJudged)
	none(t, check(t, owner, doctor.Options{}), doctor.SynchronousCommitOff, doctor.SettingsNotJudged)
}

// TestPostgresRoleNotProvenBound: a role the judgement cannot prove bound
// by row-level security is an error finding, never a pass: a NOINHERIT
// member of a CREATEROLE role is role-creates-roles, a NOINHERIT member
// of pg_read_server_files role-reaches-server-files, each with the
// REVOKE of its membership as the fix.
func TestPostgresRoleNotProvenBound(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	u, _ := url.Parse(d)
	p := u.Query().Get("search_path")
	creator, viaCreator, viaFiles := p+"_creator", p+"_via_creator", p+"_via_files"
	admin, err := sql.Open("pgx", d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	testdb.ExecAll(t, admin,
		`CREATE ROLE `+creator+` NOLOGIN CREATEROLE`,
		`CREATE ROLE `+viaCreator+` NOLOGIN NOINHERIT IN ROLE `+creator,
		`CREATE ROLE `+viaFiles+` NOLOGIN NOINHERIT IN ROLE pg_read_server_files`,
	)
	t.Cleanup(func() {
		for _, r := range []string{viaCreator, viaFiles, creator} {
			if _, err := admin.ExecContext(context.Background(), `DROP ROLE `+r); err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		}
	})
	for _, c := range []struct{ role, code, fix string }{
		{viaCreator, "role-creates-roles", `REVOKE "` + creator + `" FROM "` + viaCreator + `";`},
		{viaFiles, "role-reaches-server-files", `REVOKE "pg_read_server_files" FROM "` + viaFiles + `";`},
	} {
		f := want(t, check(t, owner, doctor.Options{Role: c.role}), c.code, doctor.Error)
		if f.Fix != c.fix {
			t.Errorf("%s: fix %q, want %q", c.code, f.Fix, c.fix)
		}
	}
}

// TestPostgresChecksTheSchemaItsTablesResolveTo proves that doctor judges
// racefree's tables where the search path finds them, as racefree's own
// statements do, not in current_schema(): connected as a role that has a
// schema of its own name, first in its search path ("$user", then the
// schema racefree was migrated into), current_schema() is the role's
// empty schema, and doctor still names a racefree table that no longer
// forces row-level security (rls-not-forced), the role that owns one of
// them (role-owns-tables) and the tables never analyzed (never-analyzed).
func TestPostgresChecksTheSchemaItsTablesResolveTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	appDSN := testdb.AppDSN(t, owner, d)
	u, err := url.Parse(appDSN)
	if err != nil {
		t.Fatal(err)
	}
	role := u.User.Username()
	schema := u.Query().Get("search_path")
	testdb.ExecAll(t, owner, `CREATE SCHEMA `+role+` AUTHORIZATION `+role)
	t.Cleanup(func() { _, _ = owner.SQL().ExecContext(context.Background(), `DROP SCHEMA IF EXISTS `+role+` CASCADE`) })
	q := u.Query()
	q.Set("search_path", `"$user",`+schema)
	u.RawQuery = q.Encode()
	app, err := dsn.Open(ctx, u.String(), &racefree.Config{Schema: racefree.SchemaAllowOutdated})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	var current string
	if err := app.SQL().QueryRowContext(ctx, `SELECT current_schema()`).Scan(&current); err != nil || current != role {
		t.Fatalf("current_schema() = %q (%v), want the role's own %q: the test would not try the edge", current, err, role)
	}

	none(t, check(t, app, doctor.Options{}), doctor.RLSNotForced, doctor.RLSNotJudged)
	testdb.ExecAll(t, owner, `ALTER TABLE racefree_claims NO FORCE ROW LEVEL SECURITY`)
	f := want(t, check(t, app, doctor.Options{}), doctor.RLSNotForced, doctor.Error)
	if !strings.Contains(f.Detail, "racefree_claims") {
		t.Fatalf("detail %q does not name the table", f.Detail)
	}
	testdb.ExecAll(t, owner, f.Fix, `ALTER TABLE racefree_audit OWNER TO `+role)
	want(t, check(t, app, doctor.Options{}), "role-owns-tables", doctor.Error)

	waitFor(t, app, doctor.Options{}, "never-analyzed of the migrations' rows", func(r doctor.Report) bool {
		f, ok := find(r, doctor.NeverAnalyzed)
		return ok && strings.Contains(f.Detail, "racefree_schema_migrations")
	})
}

// TestPostgresStaleStatisticsAtItsEdges tries stale-statistics and
// autovacuum-off at their edges, on racefree_tenants with its own
// autovacuum turned off (so that only the test analyzes it):
//   - autovacuum-off (info) names the table, with the ALTER TABLE that
//     resets it, and, where the server's autovacuum is off, the server;
//   - 1,000 rows and no ANALYZE yet: never-analyzed, not stale;
//   - analyzed with a few rows: 999 rows changed since is not stale,
//     1,000 is (info, with the ANALYZE that clears it);
//   - analyzed with n rows: n changed since is not stale, n + 1 is;
//   - the fixes clear both findings (the server's part stays while its
//     autovacuum is off).
func TestPostgresStaleStatisticsAtItsEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := owner.SQL().ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	next := 0
	insert := func(n int) {
		t.Helper()
		exec(`INSERT INTO racefree_tenants (id, created_at) SELECT 'stale-' || i, 0 FROM generate_series($1::int, $2::int) i`, next, next+n-1)
		next += n
	}
	// mods waits until the statistics count n rows changed since the
	// table's last ANALYZE (a backend reports its counts a moment after
	// its commit), and returns the rows that ANALYZE counted.
	mods := func(n int64) (tuples float64) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			var got int64
			err := owner.SQL().QueryRowContext(ctx, `SELECT s.n_mod_since_analyze, c.reltuples FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
				WHERE s.relid = 'racefree_tenants'::regclass`).Scan(&got, &tuples)
			if err != nil {
				t.Fatal(err)
			}
			if got == n {
				return tuples
			}
		}
		t.Fatalf("waited a minute for %d rows changed since the last ANALYZE", n)
		return 0
	}
	stale := func(wantStale bool) {
		t.Helper()
		rep := check(t, owner, doctor.Options{})
		f, ok := find(rep, doctor.StaleStatistics)
		if ok != wantStale || (ok && !strings.Contains(f.Detail, "racefree_tenants")) {
			t.Fatalf("stale-statistics found %v (%q), want %v", ok, f.Detail, wantStale)
		}
		if ok {
			want(t, rep, doctor.StaleStatistics, doctor.Info)
			if f.Fix != "ANALYZE racefree_tenants;" {
				t.Fatalf("fix %q", f.Fix)
			}
		}
	}
	var serverOn bool
	if err := owner.SQL().QueryRowContext(ctx, `SELECT current_setting('autovacuum')::boolean`).Scan(&serverOn); err != nil {
		t.Fatal(err)
	}

	exec(`ALTER TABLE racefree_tenants SET (autovacuum_enabled = off)`)
	rep := check(t, owner, doctor.Options{})
	f := want(t, rep, doctor.AutovacuumOff, doctor.Info)
	if !strings.Contains(f.Detail, "racefree_tenants turn it off") || !strings.Contains(f.Fix, "ALTER TABLE racefree_tenants RESET (autovacuum_enabled);") ||
		strings.Contains(f.Detail, "on the server") == serverOn {
		t.Fatalf("autovacuum-off %+v (the server's autovacuum on: %v)", f, serverOn)
	}

	// Never analyzed: every row inserted counts as changed, and
	// never-analyzed reports it, not stale-statistics.
	insert(1000)
	var rows int64
	if err := owner.SQL().QueryRowContext(ctx, `SELECT count(*) FROM racefree_tenants`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	mods(rows)
	rep = check(t, owner, doctor.Options{})
	if f, ok := find(rep, doctor.NeverAnalyzed); !ok || !strings.Contains(f.Detail, "racefree_tenants") {
		t.Fatalf("never-analyzed %v %+v", ok, f)
	}
	stale(false)

	exec(`DELETE FROM racefree_tenants WHERE id LIKE 'stale-%'`)
	mods(rows + 1000) // counted before the ANALYZE, not after it
	exec(`ANALYZE racefree_tenants`)
	mods(0)
	insert(999)
	mods(999)
	stale(false)
	insert(1)
	mods(1000)
	stale(true)

	exec(`ANALYZE racefree_tenants`)
	n := int64(mods(0))
	insert(int(n))
	mods(n)
	stale(false)
	insert(1)
	mods(n + 1)
	stale(true)

	exec(`ANALYZE racefree_tenants`)
	mods(0)
	stale(false)
	exec(`ALTER TABLE racefree_tenants RESET (autovacuum_enabled)`)
	f, ok := find(check(t, owner, doctor.Options{}), doctor.AutovacuumOff)
	if ok == serverOn || strings.Contains(f.Detail, "racefree_tenants") {
		t.Fatalf("after the reset: autovacuum-off %v %+v (the server's autovacuum on: %v)", ok, f, serverOn)
	}
}

// TestPostgresTrackCountsOffIsNotJudged: a session with track_counts off
// cannot judge the statistics: analyze-not-judged (a warning, with the
// setting that fixes it), and neither never-analyzed nor
// stale-statistics nor autovacuum-off, though a table holds a row never
// analyzed and the server's autovacuum may be off; the same database
// with track_counts on reports never-analyzed.
func TestPostgresTrackCountsOffIsNotJudged(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	if _, err := owner.SQL().Exec(`INSERT INTO racefree_tenants (id, created_at) VALUES ('doctor-uncounted', 0)`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, owner, doctor.Options{}, "never-analyzed with the counts on", has(doctor.NeverAnalyzed))
	off := testdb.Open(t, d+"&track_counts=off", nil)
	rep := check(t, off, doctor.Options{})
	f := want(t, rep, doctor.AnalyzeNotJudged, doctor.Warn)
	if !strings.Contains(f.Detail, "track_counts is off") || !strings.Contains(f.Fix, "track_counts = on") {
		t.Fatalf("analyze-not-judged %+v", f)
	}
	none(t, rep, doctor.NeverAnalyzed, doctor.StaleStatistics, doctor.AutovacuumOff)
}

// TestEdgesSQLiteEverySafeModeIsJudged seeds the journal modes and
// synchronous levels the doctor's first test leaves out: the TRUNCATE and
// PERSIST journals, as safe as DELETE, and the EXTRA level, safer than
// FULL. Each with FULL or EXTRA is judged and found sound, never
// sqlite-not-judged; each rollback journal with NORMAL is the warning,
// and a report of that warning alone fails the check, as any warning
// does.
func TestEdgesSQLiteEverySafeModeIsJudged(t *testing.T) {
	t.Parallel()
	db, exec := oneConnection(t)
	for _, journal := range []string{"WAL", "DELETE", "TRUNCATE", "PERSIST"} {
		exec(`PRAGMA journal_mode = ` + journal)
		for _, level := range []string{"FULL", "EXTRA"} {
			exec(`PRAGMA synchronous = ` + level)
			rep := check(t, db, doctor.Options{})
			none(t, rep, sqliteCodes...)
			if rep.Failed() {
				t.Errorf("journal %s, synchronous %s: the check failed: %v", journal, level, rep.Findings)
			}
		}
		if journal == "WAL" {
			continue
		}
		exec(`PRAGMA synchronous = NORMAL`)
		rep := check(t, db, doctor.Options{})
		want(t, rep, doctor.SQLiteRollbackNormal, doctor.Warn)
		if !rep.Failed() {
			t.Errorf("journal %s with NORMAL, a warning alone: the check passed: %v", journal, rep.Findings)
		}
	}
}

// TestEdgesFindingInOneLine writes a finding with a fix and one without:
// the fix comes after the detail inside "(fix: …)", and a finding without
// one has no such part.
func TestEdgesFindingInOneLine(t *testing.T) {
	t.Parallel()
	f := doctor.Finding{Code: doctor.FsyncOff, Severity: doctor.Error, Detail: "fsync is off", Fix: "ALTER SYSTEM SET fsync = on;"}
	if got, want := f.String(), "error fsync-off: fsync is off (fix: ALTER SYSTEM SET fsync = on;)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	f.Fix = ""
	if got, want := f.String(), "error fsync-off: fsync is off"; got != want {
		t.Errorf("without a fix: String() = %q, want %q", got, want)
	}
}
