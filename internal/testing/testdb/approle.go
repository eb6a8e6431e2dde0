package testdb

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/tenant"
)

// App returns dsnStr's database opened as a fresh PostgreSQL role that is
// neither superuser nor BYPASSRLS and owns nothing, granted what
// [tenant.Grant] grants: the role `racefree serve` runs as in production,
// which row-level security binds. owner must be dsnStr's database opened
// as the owner and migrated. The role is dropped when the test ends. On
// SQLite it returns owner itself.
func App(t testing.TB, owner *racefree.DB, dsnStr string) *racefree.DB {
	t.Helper()
	if owner.Engine() != racefree.Postgres {
		return owner
	}
	appDSN := AppDSN(t, owner, dsnStr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := dsn.Open(ctx, appDSN, &racefree.Config{Clock: owner.Clock()})
	if err != nil {
		t.Fatalf("testdb: open as the application role: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// EachRole runs body on a fresh database of each engine opened as its
// owner (subtest "owner": on PostgreSQL a superuser, which row-level
// security does not bind, so the tenant filter of racefree's statements is
// the only guard) and, on PostgreSQL, once more on another fresh database
// opened as the application role (subtest "app": [App], which row-level
// security binds). owner is always the database opened as its owner, for
// reading every tenant's rows; in "owner", db is owner. The databases'
// clock is clock, a manual clock set to start.
func EachRole(t *testing.T, start time.Time, body func(t *testing.T, db, owner *racefree.DB, clock *racefree.ManualClock)) {
	t.Helper()
	EachDSN(t, func(t *testing.T, d string) {
		t.Run("owner", func(t *testing.T) {
			clock := racefree.NewManualClock(start)
			owner := Open(t, d, &racefree.Config{Clock: clock})
			body(t, owner, owner, clock)
		})
		if !strings.HasPrefix(d, "postgres") {
			return
		}
		t.Run("app", func(t *testing.T) {
			clock := racefree.NewManualClock(start)
			d := NewDSN(t, racefree.Postgres)
			owner := Open(t, d, &racefree.Config{Clock: clock})
			body(t, App(t, owner, d), owner, clock)
		})
	})
}

// AppDSN creates the role App describes and returns dsnStr logged in as it.
func AppDSN(t testing.TB, owner *racefree.DB, dsnStr string) string {
	t.Helper()
	role := "rf_app_" + randomHex(6)
	admin, err := sql.Open("pgx", PostgresURL(t))
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, `CREATE ROLE `+role+` LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT`); err != nil {
		t.Fatalf("testdb: create role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.ExecContext(ctx, `DROP OWNED BY `+role)
		if _, err := admin.ExecContext(ctx, `DROP ROLE `+role); err != nil {
			t.Errorf("testdb: drop role: %v", err)
		}
	})
	if err := tenant.Grant(ctx, owner, role); err != nil {
		t.Fatalf("testdb: grant: %v", err)
	}
	u, err := url.Parse(dsnStr)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	u.User = url.User(role)
	return u.String()
}

// OwnerDSN creates a fresh role that is neither superuser nor BYPASSRLS,
// with CREATE on dsnStr's schema, and returns dsnStr logged in as it: a
// database whose migrations it runs is owned by a role that FORCE ROW
// LEVEL SECURITY binds (a superuser would bypass it). The role and what it
// owns are dropped when the test ends. PostgreSQL only.
func OwnerDSN(t testing.TB, dsnStr string) string {
	t.Helper()
	u, err := url.Parse(dsnStr)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	schema := u.Query().Get("search_path")
	role := "rf_owner_" + randomHex(6)
	admin, err := sql.Open("pgx", PostgresURL(t))
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, stmt := range []string{
		`CREATE ROLE ` + role + ` LOGIN NOSUPERUSER NOBYPASSRLS`,
		`GRANT USAGE, CREATE ON SCHEMA ` + schema + ` TO ` + role,
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("testdb: %s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.ExecContext(ctx, `DROP OWNED BY `+role)
		if _, err := admin.ExecContext(ctx, `DROP ROLE `+role); err != nil {
			t.Errorf("testdb: drop role: %v", err)
		}
	})
	u.User = url.User(role)
	return u.String()
}
