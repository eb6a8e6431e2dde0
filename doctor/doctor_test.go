package doctor_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// check runs doctor.Check and fails the test on error.
func check(t *testing.T, db *racefree.DB, opts doctor.Options) doctor.Report {
	t.Helper()
	rep, err := doctor.Check(context.Background(), db, opts)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return rep
}

// find returns the finding with code, or false.
func find(rep doctor.Report, code string) (doctor.Finding, bool) {
	for _, f := range rep.Findings {
		if f.Code == code {
			return f, true
		}
	}
	return doctor.Finding{}, false
}

// want fails unless rep has code with severity sev.
func want(t *testing.T, rep doctor.Report, code string, sev doctor.Severity) doctor.Finding {
	t.Helper()
	f, ok := find(rep, code)
	if !ok {
		t.Fatalf("no %s finding; got %v", code, rep.Findings)
	}
	if f.Severity != sev {
		t.Fatalf("%s: severity %s, want %s", code, f.Severity, sev)
	}
	if f.Detail == "" {
		t.Fatalf("%s: no detail", code)
	}
	return f
}

// none fails if rep has any of codes.
func none(t *testing.T, rep doctor.Report, codes ...string) {
	t.Helper()
	for _, f := range rep.Findings {
		if slices.Contains(codes, f.Code) {
			t.Fatalf("unexpected finding %s", f)
		}
	}
}

// waitFor runs Check until ok(report) or fails after a minute: settings
// reloaded and statistics flushed reach a session a moment later.
func waitFor(t *testing.T, db *racefree.DB, opts doctor.Options, what string, ok func(doctor.Report) bool) doctor.Report {
	t.Helper()
	var rep doctor.Report
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if rep = check(t, db, opts); ok(rep) {
			return rep
		}
	}
	t.Fatalf("waited a minute for %s; last report %v", what, rep.Findings)
	return rep
}

func has(code string) func(doctor.Report) bool {
	return func(r doctor.Report) bool { _, ok := find(r, code); return ok }
}

func hasNot(codes ...string) func(doctor.Report) bool {
	return func(r doctor.Report) bool {
		for _, c := range codes {
			if _, ok := find(r, c); ok {
				return false
			}
		}
		return true
	}
}

// sqliteCodes are the codes of the SQLite checks' findings.
var sqliteCodes = []string{doctor.SQLiteWALNormal, doctor.SQLiteSynchronousOff, doctor.SQLiteRollbackNormal, doctor.SQLiteJournalUnsafe, doctor.SQLiteNotJudged}

// oneConnection opens a SQLite database on a pool of one connection, the
// one the checks read, and returns it with exec, which runs a statement
// (a PRAGMA) there.
func oneConnection(t *testing.T) (*racefree.DB, func(string)) {
	t.Helper()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), &racefree.Config{MaxOpenConns: 1})
	return db, func(q string) {
		t.Helper()
		if _, err := db.SQL().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestSQLiteJournalAndSynchronous seeds each SQLite journal mode and
// synchronous level on the pool's one connection and wants the finding
// each means for a power loss: WAL + NORMAL (the default) info only,
// synchronous OFF an error, FULL nothing, a rollback journal with NORMAL
// a warning, a MEMORY journal an error.
func TestSQLiteJournalAndSynchronous(t *testing.T) {
	t.Parallel()
	db, exec := oneConnection(t)
	all := sqliteCodes
	rep := check(t, db, doctor.Options{})
	want(t, rep, doctor.SQLiteWALNormal, doctor.Info)
	if rep.Failed() {
		t.Fatalf("the default (WAL, NORMAL) failed: %v", rep.Findings)
	}

	exec(`PRAGMA synchronous = OFF`)
	rep = check(t, db, doctor.Options{})
	want(t, rep, doctor.SQLiteSynchronousOff, doctor.Error)
	if !rep.Failed() {
		t.Fatal("synchronous OFF did not fail")
	}

	exec(`PRAGMA synchronous = FULL`)
	none(t, check(t, db, doctor.Options{}), all...)

	exec(`PRAGMA journal_mode = DELETE`)
	exec(`PRAGMA synchronous = NORMAL`)
	want(t, check(t, db, doctor.Options{}), doctor.SQLiteRollbackNormal, doctor.Warn)
	exec(`PRAGMA synchronous = FULL`)
	none(t, check(t, db, doctor.Options{}), all...)

	exec(`PRAGMA journal_mode = MEMORY`)
	want(t, check(t, db, doctor.Options{}), doctor.SQLiteJournalUnsafe, doctor.Error)
	exec(`PRAGMA journal_mode = WAL`)
	exec(`PRAGMA synchronous = NORMAL`)
	rep = check(t, db, doctor.Options{})
	none(t, rep, doctor.SQLiteJournalUnsafe, doctor.SQLiteSynchronousOff, doctor.SQLiteRollbackNormal)
	want(t, rep, doctor.SQLiteWALNormal, doctor.Info)
}

// TestSchemaBehind: a database migrated to version 11 gets schema-behind
// (a warning) on both engines, and no row-level security verdict on
// PostgreSQL (the tables are not yet bound); migrated, neither.
func TestSchemaBehind(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db, err := dsn.Open(ctx, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.MigrateUpTo(ctx, 11); err != nil {
			t.Fatal(err)
		}
		rep := check(t, db, doctor.Options{})
		f := want(t, rep, doctor.SchemaBehind, doctor.Warn)
		if !strings.Contains(f.Detail, "version 11") {
			t.Fatalf("detail %q does not name version 11", f.Detail)
		}
		none(t, rep, doctor.RLSNotForced, doctor.RLSNotJudged, doctor.SchemaNotJudged)
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		none(t, check(t, db, doctor.Options{}), doctor.SchemaBehind, doctor.SchemaAhead, doctor.SchemaNotJudged)
	})
}

// TestPostgresAppRoleIsClean: the application role testdb.App makes
// (what tenant.Grant grants, no superuser, no BYPASSRLS, owns nothing)
// on a single server with racefree's defaults gets no finding of
// severity warn or error; the same database as its superuser owner gets
// role-is-superuser.
func TestPostgresAppRoleIsClean(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	app := testdb.App(t, owner, d)
	rep := check(t, app, doctor.Options{})
	if rep.Failed() {
		t.Fatalf("the application role failed: %v", rep.Findings)
	}
	want(t, check(t, owner, doctor.Options{}), "role-is-superuser", doctor.Error)
	// --role judges another role than the connecting one.
	want(t, check(t, app, doctor.Options{Role: "postgres"}), "role-is-superuser", doctor.Error)
	_, err := doctor.Check(context.Background(), app, doctor.Options{Role: "rf_no_such_role"})
	var ie *racefree.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("unknown role: %v, want an InputError", err)
	}
}

// TestPostgresRLSNotForced: a racefree table whose row-level security is
// no longer forced, then no longer enabled, is rls-not-forced (an error)
// with the SQL that fixes it; running the fix clears it.
func TestPostgresRLSNotForced(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	app := testdb.App(t, owner, d)
	for _, seed := range []string{
		`ALTER TABLE racefree_claims NO FORCE ROW LEVEL SECURITY`,
		`ALTER TABLE racefree_claims DISABLE ROW LEVEL SECURITY`,
	} {
		if _, err := owner.SQL().Exec(seed); err != nil {
			t.Fatal(err)
		}
		f := want(t, check(t, app, doctor.Options{}), doctor.RLSNotForced, doctor.Error)
		if !strings.Contains(f.Detail, "racefree_claims") {
			t.Fatalf("detail %q does not name the table", f.Detail)
		}
		if _, err := owner.SQL().Exec(f.Fix); err != nil {
			t.Fatalf("fix %q: %v", f.Fix, err)
		}
		none(t, check(t, app, doctor.Options{}), doctor.RLSNotForced, doctor.RLSNotJudged)
	}
}

// TestPostgresNeverAnalyzed: a racefree table with rows and no ANALYZE
// is never-analyzed (info); ANALYZE clears it.
func TestPostgresNeverAnalyzed(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	// Fewer rows than autovacuum's threshold (50), so that only ANALYZE
	// clears the finding.
	if _, err := owner.SQL().Exec(`INSERT INTO racefree_tenants (id, created_at) SELECT 'doctor-' || i, 0 FROM generate_series(1, 5) i`); err != nil {
		t.Fatal(err)
	}
	rep := waitFor(t, owner, doctor.Options{}, "never-analyzed", has(doctor.NeverAnalyzed))
	f := want(t, rep, doctor.NeverAnalyzed, doctor.Info)
	if !strings.Contains(f.Detail, "racefree_tenants") {
		t.Fatalf("detail %q does not name the table", f.Detail)
	}
	if _, err := owner.SQL().Exec(f.Fix); err != nil {
		t.Fatalf("fix %q: %v", f.Fix, err)
	}
	waitFor(t, owner, doctor.Options{}, "never-analyzed to clear", hasNot(doctor.NeverAnalyzed, doctor.AnalyzeNotJudged))
}

// TestPostgresSynchronousCommitOff: a session with synchronous_commit off
// is synchronous-commit-off (a warning); with the default, not.
func TestPostgresSynchronousCommitOff(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	off := testdb.Open(t, d+"&synchronous_commit=off", nil)
	want(t, check(t, off, doctor.Options{}), doctor.SynchronousCommitOff, doctor.Warn)
	none(t, check(t, owner, doctor.Options{}), doctor.SynchronousCommitOff, doctor.SettingsNotJudged, doctor.FsyncOff, doctor.FullPageWritesOff)
}

// TestPostgresReplication runs on a throwaway primary and asynchronous
// standby (testdb.NewCluster, whose primary runs with fsync and
// full_page_writes off): fsync-off and full-page-writes-off (errors) and
// no-standby-waits (a warning) while the standby streams and
// synchronous_standby_names is empty; with both settings on and
// synchronous_standby_names set, none of them for the superuser, and
// replication-not-judged for a role that may not see sync_state (not
// "ok": it cannot see whether the standby is synchronous); a session with
// synchronous_commit local is no-standby-waits again; with the standby
// stopped, sync-standby-not-streaming (an error), for that session too,
// and no no-standby-waits: nothing streams. Its autovacuum is on, as the
// shared test server's is not: autovacuum-off only while a table turns
// it off, naming that table and its fix alone.
func TestPostgresReplication(t *testing.T) {
	t.Parallel()
	c := testdb.NewCluster(t)
	owner := c.Primary.Open(t, nil)
	app, err := dsn.Open(context.Background(), c.Primary.URLAs(c.AppRole(t, owner)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	durability := []string{doctor.FsyncOff, doctor.FullPageWritesOff, doctor.NoStandbyWaits, doctor.SyncStandbyNotStreaming, doctor.ReplicationNotJudged, doctor.SettingsNotJudged}

	rep := check(t, owner, doctor.Options{})
	want(t, rep, doctor.FsyncOff, doctor.Error)
	want(t, rep, doctor.FullPageWritesOff, doctor.Error)
	want(t, rep, doctor.NoStandbyWaits, doctor.Warn)
	want(t, check(t, app, doctor.Options{}), doctor.NoStandbyWaits, doctor.Warn)

	// This server's autovacuum is on (PostgreSQL's default; the shared
	// test server runs with it off): no autovacuum-off until a table
	// turns it off for itself, and then a finding that names that table
	// alone, with its fix alone.
	var autovacuum bool
	if err := owner.SQL().QueryRowContext(context.Background(), `SELECT current_setting('autovacuum')::boolean`).Scan(&autovacuum); err != nil || !autovacuum {
		t.Fatalf("the cluster's autovacuum: %v, %v", autovacuum, err)
	}
	none(t, rep, doctor.AutovacuumOff)
	testdb.ExecAll(t, owner.SQL(), `ALTER TABLE racefree_claims SET (autovacuum_enabled = off)`)
	f := want(t, check(t, owner, doctor.Options{}), doctor.AutovacuumOff, doctor.Info)
	if !strings.HasPrefix(f.Detail, "racefree_claims turn it off (autovacuum_enabled): ") || f.Fix != "ALTER TABLE racefree_claims RESET (autovacuum_enabled);" {
		t.Fatalf("autovacuum-off on a server whose autovacuum is on: %+v", f)
	}
	testdb.ExecAll(t, owner.SQL(), `ALTER TABLE racefree_claims RESET (autovacuum_enabled)`)
	none(t, check(t, owner, doctor.Options{}), doctor.AutovacuumOff)

	testdb.ExecAll(t, c.Primary.DB(t),
		`ALTER SYSTEM SET fsync = on`,
		`ALTER SYSTEM SET full_page_writes = on`,
		`ALTER SYSTEM SET synchronous_standby_names = '*'`,
		`SELECT pg_reload_conf()`,
	)
	waitFor(t, owner, doctor.Options{}, "the durability findings to clear", hasNot(durability...))
	rep = waitFor(t, app, doctor.Options{}, "replication-not-judged for the application role", has(doctor.ReplicationNotJudged))
	want(t, rep, doctor.ReplicationNotJudged, doctor.Warn)
	none(t, rep, doctor.FsyncOff, doctor.FullPageWritesOff, doctor.NoStandbyWaits, doctor.SyncStandbyNotStreaming)

	// The quorum the no-standby-waits fix recommends: the standby's
	// sync_state is quorum, which waits for each commit as sync does.
	testdb.ExecAll(t, c.Primary.DB(t),
		`ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (*)'`,
		`SELECT pg_reload_conf()`,
	)
	var quorum bool
	for deadline := time.Now().Add(30 * time.Second); !quorum && time.Now().Before(deadline); {
		if err := owner.SQL().QueryRowContext(context.Background(), `SELECT count(*) FILTER (WHERE sync_state = 'quorum') > 0 FROM pg_stat_replication`).Scan(&quorum); err != nil {
			t.Fatal(err)
		}
	}
	if !quorum {
		t.Fatal("the standby never became a quorum standby")
	}
	none(t, check(t, owner, doctor.Options{}), durability...)

	local := testdb.Open(t, c.Primary.URL+"&synchronous_commit=local", nil)
	want(t, check(t, local, doctor.Options{}), doctor.NoStandbyWaits, doctor.Warn)

	c.Standby.Stop(t)
	rep = waitFor(t, owner, doctor.Options{}, "sync-standby-not-streaming", has(doctor.SyncStandbyNotStreaming))
	want(t, rep, doctor.SyncStandbyNotStreaming, doctor.Error)

	// No standby streams now: the session with synchronous_commit local
	// gets the missing standby's error, and no no-standby-waits (there is
	// no standby whose wait it skips).
	rep = check(t, local, doctor.Options{})
	want(t, rep, doctor.SyncStandbyNotStreaming, doctor.Error)
	none(t, rep, doctor.NoStandbyWaits)
}
