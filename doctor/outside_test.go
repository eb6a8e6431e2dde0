package doctor_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestEdgesCheckIsBoundedAndSaysWhyItCouldNot: the zero Options check
// (their timeout is the default, not none); a timeout that has run out
// before the first statement and a cancelled context each return
// ErrNotAnswering wrapping the cause, so that a caller tells its own
// deadline from a server that is down, and no finding stands for a check
// that did not run.
func TestEdgesCheckIsBoundedAndSaysWhyItCouldNot(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		if _, err := doctor.Check(context.Background(), db, doctor.Options{}); err != nil {
			t.Fatalf("the zero Options: %v", err)
		}
		rep, err := doctor.Check(context.Background(), db, doctor.Options{Timeout: time.Nanosecond})
		if !errors.Is(err, doctor.ErrNotAnswering) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a timeout of 1ns: %v, want ErrNotAnswering wrapping context.DeadlineExceeded", err)
		}
		if len(rep.Findings) != 0 {
			t.Fatalf("a check that did not run found %v", rep.Findings)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := doctor.Check(ctx, db, doctor.Options{}); !errors.Is(err, doctor.ErrNotAnswering) || !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled context: %v, want ErrNotAnswering wrapping context.Canceled", err)
		}
	})
}

// TestEdgesSchemaOneVersionAhead: a schema exactly one migration newer
// than the binary is schema-ahead, an error, on both engines.
func TestEdgesSchemaOneVersionAhead(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		want0, err := db.CodeVersion()
		if err != nil {
			t.Fatal(err)
		}
		none(t, check(t, db, doctor.Options{}), doctor.SchemaAhead, doctor.SchemaBehind, doctor.SchemaNotJudged)
		q := `INSERT INTO racefree_schema_migrations (version, name, applied_at) VALUES (?, 'from_a_newer_racefree', 0)`
		if db.Engine() == racefree.Postgres {
			q = strings.Replace(q, "?", "$1", 1)
		}
		if _, err := db.SQL().Exec(q, want0+1); err != nil {
			t.Fatal(err)
		}
		f := want(t, check(t, db, doctor.Options{}), doctor.SchemaAhead, doctor.Error)
		if !strings.Contains(f.Detail, "version "+strconv.FormatInt(want0+1, 10)) {
			t.Fatalf("detail %q does not name version %d", f.Detail, want0+1)
		}
	})
}

// TestPostgresRLSFixOfATableNeitherEnabledNorForced: a table whose
// row-level security is neither enabled nor forced gets a fix that does
// both, and running it leaves the table enabled and forced.
func TestPostgresRLSFixOfATableNeitherEnabledNorForced(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	testdb.ExecAll(t, owner.SQL(),
		`ALTER TABLE racefree_claims NO FORCE ROW LEVEL SECURITY`,
		`ALTER TABLE racefree_claims DISABLE ROW LEVEL SECURITY`)
	f := want(t, check(t, owner, doctor.Options{}), doctor.RLSNotForced, doctor.Error)
	if !strings.Contains(f.Fix, "ALTER TABLE racefree_claims ENABLE ROW LEVEL SECURITY;") || !strings.Contains(f.Fix, "ALTER TABLE racefree_claims FORCE ROW LEVEL SECURITY;") {
		t.Fatalf("fix %q does not both enable and force racefree_claims' row-level security", f.Fix)
	}
	testdb.ExecAll(t, owner.SQL(), f.Fix)
	var enabled, forced bool
	if err := owner.SQL().QueryRow(`SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = 'racefree_claims'::regclass`).Scan(&enabled, &forced); err != nil {
		t.Fatal(err)
	}
	if !enabled || !forced {
		t.Fatalf("after the fix: enabled %v, forced %v", enabled, forced)
	}
	none(t, check(t, owner, doctor.Options{}), doctor.RLSNotForced, doctor.RLSNotJudged)
}

// TestPostgresAutovacuumOffInEverySpelling: PostgreSQL takes any prefix
// of false, of no, of off (two letters on) and 0 as a boolean storage
// parameter's false, and keeps it as written: each of them, in any case,
// on a racefree table turns autovacuum off for it and is autovacuum-off
// naming the table; a spelling of true is not.
func TestPostgresAutovacuumOffInEverySpelling(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	for _, v := range []string{"false", "FALSE", "f", "fa", "fals", "no", "n", "off", "of", "0"} {
		testdb.ExecAll(t, owner.SQL(), `ALTER TABLE racefree_tenants SET (autovacuum_enabled = '`+v+`')`)
		rep := check(t, owner, doctor.Options{})
		f, ok := find(rep, doctor.AutovacuumOff)
		if !ok || !strings.Contains(f.Detail, "racefree_tenants turn it off") {
			t.Errorf("autovacuum_enabled = %s: no autovacuum-off naming racefree_tenants: %v", v, rep.Findings)
		}
	}
	testdb.ExecAll(t, owner.SQL(), `ALTER TABLE racefree_tenants SET (autovacuum_enabled = 'tr')`)
	if f, ok := find(check(t, owner, doctor.Options{}), doctor.AutovacuumOff); ok && strings.Contains(f.Detail, "racefree_tenants") {
		t.Fatalf("autovacuum_enabled = tr (true) is named: %v", f)
	}
}

// TestEdgesSQLiteOffJournalAndOffSynchronousTogether: a file with no
// journal (OFF) is sqlite-journal-unsafe, an error, not sqlite-not-judged;
// an unsafe journal with synchronous OFF reports both, each with its own
// fix.
func TestEdgesSQLiteOffJournalAndOffSynchronousTogether(t *testing.T) {
	t.Parallel()
	db, exec := oneConnection(t)
	exec(`PRAGMA journal_mode = DELETE`)
	exec(`PRAGMA journal_mode = OFF`)
	exec(`PRAGMA synchronous = FULL`)
	rep := check(t, db, doctor.Options{})
	f := want(t, rep, doctor.SQLiteJournalUnsafe, doctor.Error)
	if !strings.Contains(f.Detail, "OFF") {
		t.Fatalf("detail %q does not name the OFF journal", f.Detail)
	}
	none(t, rep, doctor.SQLiteNotJudged, doctor.SQLiteSynchronousOff)
	for _, journal := range []string{"OFF", "MEMORY"} {
		exec(`PRAGMA journal_mode = ` + journal)
		exec(`PRAGMA synchronous = OFF`)
		rep = check(t, db, doctor.Options{})
		want(t, rep, doctor.SQLiteJournalUnsafe, doctor.Error)
		want(t, rep, doctor.SQLiteSynchronousOff, doctor.Error)
		exec(`PRAGMA synchronous = FULL`)
	}
}

// TestEdgesCodesListEveryFindingOfItsEngine: Codes, which serve's gauge
// racefree_doctor_findings{code} sets a series for, lists every code each
// engine's checks can report, the not-judged ones too, and no code of the
// other engine.
func TestEdgesCodesListEveryFindingOfItsEngine(t *testing.T) {
	t.Parallel()
	schema := []string{doctor.SchemaBehind, doctor.SchemaAhead, doctor.SchemaNotJudged}
	sqlite := append([]string{doctor.SQLiteSynchronousOff, doctor.SQLiteJournalUnsafe, doctor.SQLiteRollbackNormal, doctor.SQLiteWALNormal, doctor.SQLiteNotJudged}, schema...)
	postgres := append([]string{
		doctor.FsyncOff, doctor.FullPageWritesOff, doctor.SynchronousCommitOff, doctor.SettingsNotJudged,
		doctor.NoStandbyWaits, doctor.SyncStandbyNotStreaming, doctor.ReplicationNotJudged, doctor.StrictRefusesWrites,
		"role-is-superuser", "role-bypasses-rls", "role-owns-tables", "role-creates-roles", "role-reaches-server-files", doctor.RoleNotJudged,
		doctor.RLSNotForced, doctor.PrivilegeEscapesRLS, doctor.ViewEscapesRLS, doctor.DefinerEscapesRLS, doctor.RLSNotJudged, doctor.NeverAnalyzed, doctor.StaleStatistics, doctor.AutovacuumOff, doctor.AnalyzeNotJudged,
		doctor.PoolerPreparedStatements, doctor.PoolerNotJudged,
	}, schema...)
	for engine, codes := range map[string][]string{racefree.SQLite: sqlite, racefree.Postgres: postgres} {
		got := doctor.Codes(engine)
		for _, c := range codes {
			if !slices.Contains(got, c) {
				t.Errorf("Codes(%s) lacks %s: %v", engine, c, got)
			}
		}
		if len(got) != len(codes) {
			t.Errorf("Codes(%s) = %v, want the %d codes %v", engine, got, len(codes), codes)
		}
	}
}

// TestPostgresPoolOfOneConnection: on a pool of one connection the pooler
// probe, which needs two sessions, cannot run: pooler-not-judged, a
// warning, never silence; the checks that need one connection judge as
// usual (a fresh database's empty racefree_claims is not
// never-analyzed: there is no size to guess).
func TestPostgresPoolOfOneConnection(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), &racefree.Config{MaxOpenConns: 1})
	rep := check(t, db, doctor.Options{})
	want(t, rep, doctor.PoolerNotJudged, doctor.Warn)
	none(t, rep, doctor.PoolerPreparedStatements, doctor.SchemaNotJudged, doctor.RLSNotJudged, doctor.AnalyzeNotJudged)
	if f, ok := find(rep, doctor.NeverAnalyzed); ok {
		names, _, _ := strings.Cut(f.Detail, " hold rows")
		if slices.Contains(strings.Split(names, ", "), "racefree_claims") {
			t.Fatalf("racefree_claims, empty, is never-analyzed: %s", f.Detail)
		}
	}
	if !rep.Failed() {
		t.Fatalf("a pooler not judged passed: %v", rep.Findings)
	}
}

// TestPostgresStrictModeOnAServerWithoutStandbys: a DB that requires
// synchronous replication, on the shared server that has no standby, is
// strict-refuses-writes, an error with the reason writes are refused; the
// same database opened without the requirement is not.
func TestPostgresStrictModeOnAServerWithoutStandbys(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	plain := testdb.Open(t, d, nil)
	none(t, check(t, plain, doctor.Options{}), doctor.StrictRefusesWrites)
	strict := testdb.Open(t, d, &racefree.Config{RequireSynchronousReplication: true})
	f := want(t, check(t, strict, doctor.Options{}), doctor.StrictRefusesWrites, doctor.Error)
	if !strings.Contains(f.Detail, "refuses every write now") {
		t.Fatalf("detail %q", f.Detail)
	}
}
