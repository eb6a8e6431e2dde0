package doctor_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestPostgresTooFewSynchronousStandbys runs on a throwaway primary with
// one standby (testdb.NewCluster). synchronous_standby_names that waits
// for two synchronous standbys (ANY 2 (*), FIRST 2 (*) and 2 (*)) while
// one streams makes every commit wait for one that is not there: the
// doctor reports sync-standby-not-streaming, an error naming the two it
// waits for, though a standby streams as synchronous; and a DB in strict
// mode refuses, with the reason and committing nothing, a write on the
// pool, one in tenant.InTx and one in a transaction of the caller's own
// (the two statements a write begins with: set_strict for the first two,
// ensure_strict for the last). Waiting for one (FIRST 1 (*), or a bare
// *), neither, and the writes pass; with the standby stopped, a bare * is
// refused again (no synchronous standby streams). Then, since the server
// is its own, ALTER ROLE ALL SET synchronous_commit = off: doctor --role
// reports synchronous-commit-off for another role.
func TestPostgresTooFewSynchronousStandbys(t *testing.T) {
	t.Parallel()
	c := testdb.NewCluster(t)
	ctx := context.Background()
	owner := c.Primary.Open(t, nil)
	strict := testdb.Open(t, c.Primary.URL, &racefree.Config{RequireSynchronousReplication: true})
	p := c.Primary.DB(t)
	acme, err := tenant.With(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	// A write that is let through waits at its commit for the standby
	// that is not there: its bound ends the wait (the commit then stays
	// on the primary alone, PostgreSQL's answer to a cancelled wait).
	n := 0
	writes := map[string]func() error{
		"on the pool": func() error {
			n++
			ctx, cancel := context.WithTimeout(acme, 10*time.Second)
			defer cancel()
			_, err := claim.New(strict).Acquire(ctx, strict, "pool"+strconv.Itoa(n), "h", time.Minute)
			return err
		},
		"in tenant.InTx": func() error {
			n++
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return tenant.InTx(ctx, strict, "acme", func(ctx context.Context, tx *sql.Tx) error {
				_, err := claim.New(strict).Acquire(ctx, tx, "tx"+strconv.Itoa(n), "h", time.Minute)
				return err
			})
		},
		"in a transaction of the caller's own": func() error {
			n++
			ctx, cancel := context.WithTimeout(acme, 10*time.Second)
			defer cancel()
			tx, err := strict.SQL().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := claim.New(strict).Acquire(ctx, tx, "own"+strconv.Itoa(n), "h", time.Minute); err != nil {
				return err
			}
			return tx.Commit()
		},
	}
	claims := func() (n int) {
		t.Helper()
		if err := p.QueryRow(`SELECT count(*) FROM racefree_claims`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// set makes names the primary's synchronous_standby_names and waits
	// until the primary's sessions see it and the standby streams in the
	// state it gives (sync, quorum or, stopped, none).
	set := func(names, state string) {
		t.Helper()
		testdb.ExecAll(t, p, `ALTER SYSTEM SET synchronous_standby_names = '`+names+`'`, `SELECT pg_reload_conf()`)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			var ok bool
			err := p.QueryRow(`SELECT current_setting('synchronous_standby_names') = $1
			                      AND (SELECT count(*) FILTER (WHERE state = 'streaming' AND sync_state = $2) FROM pg_stat_replication) = 1`,
				names, state).Scan(&ok)
			if err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waited a minute for synchronous_standby_names %q with a standby streaming as %s: %v", names, state, err)
			}
		}
	}
	refused := func(names, why string) {
		t.Helper()
		before := claims()
		for name, write := range writes {
			var nd *racefree.NotDurableError
			if err := write(); !errors.As(err, &nd) || !strings.Contains(nd.Reason, why) {
				t.Errorf("synchronous_standby_names %q: a strict write %s: %v, want racefree.ErrNotDurable saying %q", names, name, err, why)
			}
		}
		if after := claims(); after != before {
			t.Errorf("synchronous_standby_names %q: refused writes left %d claims, want %d", names, after, before)
		}
	}

	for _, names := range []struct{ names, state string }{{"ANY 2 (*)", "quorum"}, {"FIRST 2 (*)", "sync"}, {"2 (*)", "sync"}} {
		set(names.names, names.state)
		f := want(t, check(t, owner, doctor.Options{}), doctor.SyncStandbyNotStreaming, doctor.Error)
		if !strings.Contains(f.Detail, "waits for 2 synchronous standbys, but 1 of the 1 streaming standbys are synchronous") {
			t.Errorf("synchronous_standby_names %q: detail %q", names.names, f.Detail)
		}
		refused(names.names, "fewer synchronous standbys stream than synchronous_standby_names waits for ("+names.names+")")
	}

	for _, names := range []string{"FIRST 1 (*)", "*"} {
		set(names, "sync")
		none(t, check(t, owner, doctor.Options{}), doctor.SyncStandbyNotStreaming)
		before := claims()
		for name, write := range writes {
			if err := write(); err != nil {
				t.Errorf("synchronous_standby_names %q: a strict write %s: %v", names, name, err)
			}
		}
		if after := claims(); after != before+len(writes) {
			t.Errorf("synchronous_standby_names %q: %d claims after %d writes, want %d", names, after, len(writes), before+len(writes))
		}
	}

	c.Standby.Stop(t)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var streaming int
		if err := p.QueryRow(`SELECT count(*) FROM pg_stat_replication`).Scan(&streaming); err == nil && streaming == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("waited a minute for the stopped standby to leave pg_stat_replication")
		}
	}
	refused("*", "no synchronous standby streams")

	// On a server of its own, ALTER ROLE ALL SET, the least specific of
	// the settings sessions start with, reaches doctor --role too.
	// (No standby now: a commit would wait for ever unless the list is
	// emptied first.)
	testdb.ExecAll(t, p, `ALTER SYSTEM SET synchronous_standby_names = ''`, `SELECT pg_reload_conf()`)
	testdb.ExecAll(t, p, `ALTER ROLE ALL SET synchronous_commit = off`)
	f := want(t, check(t, owner, doctor.Options{Role: c.AppRole(t, owner)}), doctor.SynchronousCommitOff, doctor.Warn)
	if !strings.Contains(f.Detail, "'s sessions") {
		t.Errorf("detail %q does not name the role", f.Detail)
	}
}

// TestPostgresSynchronousCommitOfAnotherRole: doctor --role judges the
// synchronous_commit that role's sessions start with, not the checking
// session's: ALTER ROLE … SET synchronous_commit = false (any spelling of
// off) is synchronous-commit-off naming the role, though the checking
// session's is on; ALTER ROLE … IN DATABASE … SET, more specific, wins
// over it, and ALTER DATABASE … SET applies when the role sets nothing.
// When nothing sets it for the role and the checking session's own value
// comes from its DSN, the server's value the role would get is hidden:
// settings-not-judged, never the session's value taken for the role's.
// Judging the checking role itself reads the session as before.
func TestPostgresSynchronousCommitOfAnotherRole(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	u, err := url.Parse(testdb.AppDSN(t, owner, d))
	if err != nil {
		t.Fatal(err)
	}
	role, database := u.User.Username(), strings.TrimPrefix(u.Path, "/")
	judge := doctor.Options{Role: role}
	exec := func(stmts ...string) {
		t.Helper()
		testdb.ExecAll(t, owner.SQL(), stmts...)
	}
	t.Cleanup(func() { _, _ = owner.SQL().Exec(`ALTER DATABASE "` + database + `" RESET synchronous_commit`) })

	none(t, check(t, owner, judge), doctor.SynchronousCommitOff, doctor.SettingsNotJudged)
	exec(`ALTER ROLE ` + role + ` SET synchronous_commit = false`)
	f := want(t, check(t, owner, judge), doctor.SynchronousCommitOff, doctor.Warn)
	if !strings.Contains(f.Detail, `synchronous_commit is off for role "`+role+`"'s sessions`) {
		t.Errorf("detail %q does not name the role", f.Detail)
	}
	none(t, check(t, owner, doctor.Options{}), doctor.SynchronousCommitOff)
	none(t, check(t, owner, doctor.Options{Role: "postgres"}), doctor.SynchronousCommitOff, doctor.SettingsNotJudged)

	exec(`ALTER ROLE ` + role + ` IN DATABASE "` + database + `" SET synchronous_commit = on`)
	none(t, check(t, owner, judge), doctor.SynchronousCommitOff, doctor.SettingsNotJudged)

	exec(`ALTER ROLE `+role+` RESET synchronous_commit`, `ALTER ROLE `+role+` IN DATABASE "`+database+`" RESET synchronous_commit`,
		`ALTER DATABASE "`+database+`" SET synchronous_commit = off`)
	want(t, check(t, owner, judge), doctor.SynchronousCommitOff, doctor.Warn)
	exec(`ALTER DATABASE "` + database + `" RESET synchronous_commit`)

	own := testdb.Open(t, d+"&synchronous_commit=on", nil)
	rep := check(t, own, judge)
	want(t, rep, doctor.SettingsNotJudged, doctor.Warn)
	none(t, rep, doctor.SynchronousCommitOff)
	none(t, check(t, own, doctor.Options{}), doctor.SettingsNotJudged)
	none(t, check(t, own, doctor.Options{Role: "postgres"}), doctor.SettingsNotJudged)
	exec(`ALTER ROLE ` + role + ` SET synchronous_commit = 0`)
	rep = check(t, own, judge)
	want(t, rep, doctor.SynchronousCommitOff, doctor.Warn)
	none(t, rep, doctor.SettingsNotJudged)
}
