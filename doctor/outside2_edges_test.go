package doctor_test

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestOutside2ReportInJSON: a Report marshals as racefree doctor --format
// json prints it: a clean report's findings are an empty array, never
// null, and every finding carries its four fields, fix too when it has
// none (a pooler not judged on a pool of one connection), on both
// engines.
func TestOutside2ReportInJSON(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{MaxOpenConns: 1}, func(t *testing.T, db *racefree.DB) {
		if db.Engine() == racefree.SQLite {
			testdb.ExecAll(t, db.SQL(), `PRAGMA synchronous = FULL`)
		}
		rep := check(t, db, doctor.Options{})
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Engine   string            `json:"engine"`
			Findings []json.RawMessage `json:"findings"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if db.Engine() == racefree.SQLite {
			if len(rep.Findings) != 0 || !strings.Contains(string(b), `"findings":[]`) {
				t.Fatalf("a clean SQLite report (WAL, FULL) marshals as %s, want an empty array of findings", b)
			}
			return
		}
		if f, ok := find(rep, doctor.PoolerNotJudged); !ok || f.Fix != "" {
			t.Fatalf("no pooler-not-judged without a fix on a pool of one: %v", rep.Findings)
		}
		if len(got.Findings) != len(rep.Findings) {
			t.Fatalf("%d findings marshalled, %d found: %s", len(got.Findings), len(rep.Findings), b)
		}
		for _, raw := range got.Findings {
			var fields map[string]any
			if err := json.Unmarshal(raw, &fields); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"code", "severity", "detail", "fix"} {
				if _, ok := fields[k]; !ok {
					t.Errorf("finding %s has no %q field", raw, k)
				}
			}
		}
	})
}

// TestOutside2SynchronousCommitOffNamesTheCheckingSession: without
// Options.Role, synchronous-commit-off says whose synchronous_commit is
// off: this session's.
func TestOutside2SynchronousCommitOffNamesTheCheckingSession(t *testing.T) {
	t.Parallel()
	off := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres)+"&synchronous_commit=off", nil)
	f := want(t, check(t, off, doctor.Options{}), doctor.SynchronousCommitOff, doctor.Warn)
	if !strings.Contains(f.Detail, "synchronous_commit is off for this session:") {
		t.Fatalf("detail %q does not name the checking session", f.Detail)
	}
}

// TestPostgresOutside2RoleSynchronousCommitInAnyCase: ALTER ROLE … SET
// synchronous_commit keeps a quoted value as written, capitals too: 'OFF',
// 'False' and 'NO' are each off for the judged role's sessions
// (synchronous-commit-off), and 'ON' is not.
func TestPostgresOutside2RoleSynchronousCommitInAnyCase(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	role := roleOf(t, testdb.AppDSN(t, owner, d))
	judge := doctor.Options{Role: role}
	for _, v := range []string{"OFF", "False", "NO"} {
		testdb.ExecAll(t, owner.SQL(), `ALTER ROLE `+role+` SET synchronous_commit = '`+v+`'`)
		f := want(t, check(t, owner, judge), doctor.SynchronousCommitOff, doctor.Warn)
		if !strings.Contains(f.Detail, `role "`+role+`"'s sessions`) {
			t.Fatalf("synchronous_commit = '%s': detail %q does not name the role", v, f.Detail)
		}
	}
	testdb.ExecAll(t, owner.SQL(), `ALTER ROLE `+role+` SET synchronous_commit = 'ON'`)
	none(t, check(t, owner, judge), doctor.SynchronousCommitOff, doctor.SettingsNotJudged)
}

// TestPostgresOutside2CheckingRolesOwnSettingHidesTheServers: a checking
// role whose sessions get synchronous_commit from ALTER ROLE (source
// user) or ALTER ROLE … IN DATABASE (source database user) does not see
// the server's value that another role, with nothing set for it, gets:
// judging that role is settings-not-judged, never the checking session's
// off taken for the role's, and, with no standby streaming, no
// replication-not-judged either (there is nothing to judge). Not
// parallel, and a report taken while an ALTER DATABASE … SET
// synchronous_commit (of another test, in this process or another) gives
// the judged role a value of its own is taken again.
func TestPostgresOutside2CheckingRolesOwnSettingHidesTheServers(t *testing.T) {
	ctx := context.Background()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	checker := testdb.AppDSN(t, owner, d)
	checkerRole := roleOf(t, checker)
	judged := roleOf(t, testdb.AppDSN(t, owner, d))
	u, err := url.Parse(d)
	if err != nil {
		t.Fatal(err)
	}
	database := strings.TrimPrefix(u.Path, "/")
	for _, c := range []struct{ set, reset, source string }{
		{`ALTER ROLE ` + checkerRole + ` SET synchronous_commit = off`, `ALTER ROLE ` + checkerRole + ` RESET synchronous_commit`, "user"},
		{`ALTER ROLE ` + checkerRole + ` IN DATABASE "` + database + `" SET synchronous_commit = off`, `ALTER ROLE ` + checkerRole + ` IN DATABASE "` + database + `" RESET synchronous_commit`, "database user"},
	} {
		testdb.ExecAll(t, owner.SQL(), c.set)
		db, err := dsn.Open(ctx, checker, nil)
		if err != nil {
			t.Fatal(err)
		}
		var source string
		if err := db.SQL().QueryRowContext(ctx, `SELECT source FROM pg_settings WHERE name = 'synchronous_commit'`).Scan(&source); err != nil || source != c.source {
			t.Fatalf("the checking session's synchronous_commit comes from %q (%v), want %q: the test would not try the edge", source, err, c.source)
		}
		rep := withoutDatabaseSetting(t, db, doctor.Options{Role: judged})
		want(t, rep, doctor.SettingsNotJudged, doctor.Warn)
		none(t, rep, doctor.SynchronousCommitOff, doctor.ReplicationNotJudged, doctor.NoStandbyWaits)
		want(t, check(t, db, doctor.Options{}), doctor.SynchronousCommitOff, doctor.Warn)
		_ = db.Close()
		testdb.ExecAll(t, owner.SQL(), c.reset)
	}
}

// TestPostgresOutside2TablesNamedLikeRacefreeAreNotItsOwn: the checks of
// racefree's tables read the racefree_ prefix, underscore included: an
// application's own table named racefreelog, without row-level security,
// holding a row (counted by the statistics) and never analyzed, is
// neither rls-not-forced nor never-analyzed, while racefree's own ledger
// is never-analyzed, with the ANALYZE of the tables it names, by name.
func TestPostgresOutside2TablesNamedLikeRacefreeAreNotItsOwn(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	testdb.ExecAll(t, owner.SQL(), `CREATE TABLE racefreelog (id int PRIMARY KEY)`, `INSERT INTO racefreelog VALUES (1)`)
	waitFor(t, owner, doctor.Options{}, "racefreelog's row counted", func(doctor.Report) bool {
		n := testdb.Strings(t, owner.SQL(), `SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'racefreelog'::regclass`)
		return len(n) == 1 && n[0] != "0"
	})
	rep := check(t, owner, doctor.Options{})
	if !names(doctor.NeverAnalyzed, "racefree_schema_migrations")(rep) {
		t.Fatalf("no never-analyzed naming the ledger: %v", rep.Findings)
	}
	f, _ := find(rep, doctor.NeverAnalyzed)
	if slices.Contains(tables(f.Detail), "racefreelog") {
		t.Fatalf("never-analyzed names the application's racefreelog: %s", f.Detail)
	}
	if wantFix := "ANALYZE " + strings.Join(tables(f.Detail), ", ") + ";"; f.Fix != wantFix {
		t.Fatalf("never-analyzed's fix %q, want %q: the tables it names, by name", f.Fix, wantFix)
	}
	none(t, rep, doctor.RLSNotForced, doctor.RLSNotJudged)
}

// TestPostgresOutside2AnotherRacefreeSchemaIsNotJudged: a second racefree
// migrated into another schema of the same database is not this one's:
// its table that turns autovacuum off, and its table holding rows never
// analyzed, are named when the second is checked and never when the
// first is (its own racefree_tenants analyzed, and left as the server
// sets it).
func TestPostgresOutside2AnotherRacefreeSchemaIsNotJudged(t *testing.T) {
	t.Parallel()
	first := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	second := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	testdb.ExecAll(t, second.SQL(),
		`ALTER TABLE racefree_tenants SET (autovacuum_enabled = off)`,
		`INSERT INTO racefree_tenants (id, created_at) SELECT 'outside2-' || i, 0 FROM generate_series(1, 3) i`)
	testdb.ExecAll(t, first.SQL(), `ANALYZE racefree_tenants`)
	rep := waitFor(t, second, doctor.Options{}, "never-analyzed naming the second's racefree_tenants", names(doctor.NeverAnalyzed, "racefree_tenants"))
	if f, ok := find(rep, doctor.AutovacuumOff); !ok || !strings.Contains(f.Detail, "racefree_tenants turn it off") {
		t.Fatalf("the second racefree's racefree_tenants is not autovacuum-off: %v", rep.Findings)
	}
	rep = check(t, first, doctor.Options{})
	if f, ok := find(rep, doctor.NeverAnalyzed); ok && slices.Contains(tables(f.Detail), "racefree_tenants") {
		t.Errorf("never-analyzed names the other schema's racefree_tenants: %s", f.Detail)
	}
	if f, ok := find(rep, doctor.AutovacuumOff); ok && (strings.Contains(f.Detail, "racefree_tenants") || strings.Contains(f.Fix, "racefree_tenants")) {
		t.Errorf("autovacuum-off names the other schema's racefree_tenants: %s (fix: %s)", f.Detail, f.Fix)
	}
}

// TestOutside2CheckHandsItsConnectionsBack: Check, the pooler probe's
// two sessions included, hands every connection it took back to the
// pool: none is in use once it returns, on both engines, and a pool of
// two connections checked again still has both for the probe.
func TestOutside2CheckHandsItsConnectionsBack(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{MaxOpenConns: 2}, func(t *testing.T, db *racefree.DB) {
		for i := 0; i < 2; i++ {
			rep := check(t, db, doctor.Options{})
			none(t, rep, doctor.PoolerNotJudged)
			if n := db.SQL().Stats().InUse; n != 0 {
				t.Fatalf("check %d: %d connections still in use after Check returned", i+1, n)
			}
		}
	})
}

// TestPostgresOutside2AutovacuumOffFixResetsEveryTable: two racefree
// tables that turn autovacuum off are both named by autovacuum-off, and
// its fix resets each: run, neither is named any more.
func TestPostgresOutside2AutovacuumOffFixResetsEveryTable(t *testing.T) {
	t.Parallel()
	owner := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	testdb.ExecAll(t, owner.SQL(),
		`ALTER TABLE racefree_claims SET (autovacuum_enabled = off)`,
		`ALTER TABLE racefree_tenants SET (autovacuum_enabled = off)`)
	f := want(t, check(t, owner, doctor.Options{}), doctor.AutovacuumOff, doctor.Info)
	for _, table := range []string{"racefree_claims", "racefree_tenants"} {
		if !strings.Contains(f.Detail, table) || !strings.Contains(f.Fix, "ALTER TABLE "+table+" RESET (autovacuum_enabled);") {
			t.Errorf("autovacuum-off does not name %s, or its fix does not reset it: %s (fix: %s)", table, f.Detail, f.Fix)
		}
	}
	// The tables' part of the fix; the server's (ALTER SYSTEM), on the
	// shared server whose autovacuum is off, is not the test's to run.
	for _, stmt := range strings.Split(f.Fix, ";") {
		if stmt = strings.TrimSpace(stmt); strings.HasPrefix(stmt, "ALTER TABLE ") {
			testdb.ExecAll(t, owner.SQL(), stmt)
		}
	}
	if f, ok := find(check(t, owner, doctor.Options{}), doctor.AutovacuumOff); ok && strings.Contains(f.Detail, "turn it off") {
		t.Fatalf("after the fix: %s", f.Detail)
	}
}

// TestPostgresOutside2PoolWithoutALimitIsProbed: a pool whose limit the
// caller lifted (db.SQL().SetMaxOpenConns(0): no limit) has the probe's
// two sessions; only a pool of one is pooler-not-judged.
func TestPostgresOutside2PoolWithoutALimitIsProbed(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	db.SQL().SetMaxOpenConns(0)
	none(t, check(t, db, doctor.Options{}), doctor.PoolerNotJudged, doctor.PoolerPreparedStatements)
	db.SQL().SetMaxOpenConns(1)
	want(t, check(t, db, doctor.Options{}), doctor.PoolerNotJudged, doctor.Warn)
}

// withoutDatabaseSetting runs Check until no ALTER DATABASE (or ALTER
// ROLE ALL) … SET synchronous_commit for db's database stood before and
// after it, and returns that report: such a setting gives every role a
// value of its own.
func withoutDatabaseSetting(t *testing.T, db *racefree.DB, opts doctor.Options) doctor.Report {
	t.Helper()
	quiet := func() bool {
		n := testdb.Strings(t, db.SQL(), `SELECT count(*) FROM pg_db_role_setting AS s, unnest(s.setconfig) AS cfg
			WHERE s.setrole = 0 AND s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
			  AND cfg LIKE 'synchronous\_commit=%'`)
		return n[0] == "0"
	}
	var rep doctor.Report
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !quiet() {
			continue
		}
		if rep = check(t, db, opts); quiet() {
			return rep
		}
	}
	t.Fatalf("waited a minute for no database-wide synchronous_commit; last report %v", rep.Findings)
	return rep
}

// roleOf returns the user a PostgreSQL DSN logs in as.
func roleOf(t *testing.T, d string) string {
	t.Helper()
	u, err := url.Parse(d)
	if err != nil {
		t.Fatal(err)
	}
	return u.User.Username()
}

// tables returns the tables a never-analyzed detail names.
func tables(detail string) []string {
	list, _, _ := strings.Cut(detail, " hold rows")
	return strings.Split(list, ", ")
}

// names reports whether a report's finding code names table.
func names(code, table string) func(doctor.Report) bool {
	return func(r doctor.Report) bool {
		f, ok := find(r, code)
		return ok && slices.Contains(tables(f.Detail), table)
	}
}
