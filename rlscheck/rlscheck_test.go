package rlscheck_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/rlscheck"
)

// fixture is a schema of its own with a correct row-level security set-up,
// and four roles of its own (roles are cluster-wide): app, the role the
// application logs in as; owner, which owns the tenant tables; admin, for
// which a wide-open policy exists; group, a role with no privilege.
type fixture struct {
	db                       *sql.DB
	dsn                      string
	app, owner, admin, group string
}

const guardUUID = `tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')::uuid`
const guardText = `tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')`
const guardBigint = `tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')::bigint`

func setup(t *testing.T) *fixture {
	t.Helper()
	// A database of its own: SECURITY DEFINER functions are followed in
	// every schema, and other tests' would show up.
	dsn := testdb.NewDatabaseDSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	suffix := randomHex()
	f := &fixture{db: db, dsn: dsn, app: "rf_rls_app_" + suffix, owner: "rf_rls_owner_" + suffix, admin: "rf_rls_admin_" + suffix, group: "rf_rls_group_" + suffix}
	for _, r := range []string{f.app, f.owner, f.admin, f.group} {
		f.exec(t, `CREATE ROLE `+r+` NOLOGIN`)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := db.ExecContext(ctx, `DROP OWNED BY `+r+` CASCADE`); err != nil {
				t.Errorf("drop owned by %s: %v", r, err)
			}
			if _, err := db.ExecContext(ctx, `DROP ROLE `+r); err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		})
	}
	f.exec(t, `
CREATE TABLE orders (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, total int NOT NULL);
ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
ALTER TABLE orders FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON orders USING (`+guardUUID+`) WITH CHECK (`+guardUUID+`);
CREATE POLICY admin_all ON orders TO `+f.admin+` USING (true) WITH CHECK (true);

CREATE TABLE notes (id bigint PRIMARY KEY, tenant_id text NOT NULL, body text);
ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
ALTER TABLE notes FORCE ROW LEVEL SECURITY;
CREATE POLICY notes_select ON notes FOR SELECT USING (`+guardText+`);
CREATE POLICY notes_insert ON notes FOR INSERT WITH CHECK (`+guardText+`);
CREATE POLICY notes_update ON notes FOR UPDATE USING (`+guardText+`) WITH CHECK (`+guardText+`);
CREATE POLICY notes_delete ON notes FOR DELETE USING (`+guardText+`);

CREATE TABLE events (id bigint PRIMARY KEY, tenant_id bigint NOT NULL);
ALTER TABLE events ENABLE ROW LEVEL SECURITY;
ALTER TABLE events FORCE ROW LEVEL SECURITY;
CREATE POLICY events_open ON events USING (true) WITH CHECK (true);
CREATE POLICY events_tenant ON events AS RESTRICTIVE USING (`+guardBigint+`);

ALTER TABLE orders OWNER TO `+f.owner+`;
ALTER TABLE notes OWNER TO `+f.owner+`;
ALTER TABLE events OWNER TO `+f.owner+`;

CREATE TABLE countries (code text PRIMARY KEY);
CREATE VIEW order_totals WITH (security_invoker = true) AS SELECT tenant_id, sum(total) AS total FROM orders GROUP BY tenant_id;
CREATE VIEW country_codes AS SELECT code FROM countries;
CREATE FUNCTION order_count() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM orders';
CREATE FUNCTION country_count() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT count(*) FROM countries';
`)
	return f
}

func (f *fixture) exec(t *testing.T, sql string) {
	t.Helper()
	if _, err := f.db.ExecContext(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (f *fixture) check(t *testing.T, opts rlscheck.Options) *rlscheck.Report {
	t.Helper()
	rep, err := rlscheck.New(f.db).Check(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func kinds(rep *rlscheck.Report) []rlscheck.Kind {
	var ks []rlscheck.Kind
	for _, f := range rep.Findings {
		if !slices.Contains(ks, f.Kind) {
			ks = append(ks, f.Kind)
		}
	}
	return ks
}

func TestCheckPassesACorrectSetUp(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rep := f.check(t, rlscheck.Options{Role: f.app})
	if len(rep.Findings) != 0 || len(rep.Warnings) != 0 {
		t.Fatalf("findings on a correct set-up: %+v", rep)
	}
	if got, want := strings.Join(rep.Tables, " "), `"events" "notes" "orders"`; strings.ReplaceAll(got, `"`+rep.Schemas[0]+`".`, "") != want {
		t.Fatalf("tenant tables %s, want %s", got, want)
	}
}

// TestCheckScopesPoliciesToTheRole: a wide-open policy for another role is
// not the application's concern with --role, and is without it.
func TestCheckScopesPoliciesToTheRole(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rep := f.check(t, rlscheck.Options{})
	if got, want := kinds(rep), []rlscheck.Kind{rlscheck.PolicyAlwaysTrue}; !slices.Equal(got, want) || len(rep.Findings) != 1 || !strings.Contains(rep.Findings[0].Object, `"admin_all"`) {
		t.Fatalf("without a role: %+v, want the admin policy only", rep.Findings)
	}
}

// TestCheckFindsEachMisconfiguration seeds one misconfiguration per case
// into a correct set-up and wants exactly its kind; then runs the fix SQL of
// every finding and wants the set-up clean again.
func TestCheckFindsEachMisconfiguration(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		seed  string // %[1]s app, %[2]s owner, %[3]s group, %[4]s admin
		want  rlscheck.Kind
		also  rlscheck.Kind // a second kind, after want
		count int           // findings expected; 0 means 1
		noFix bool          // the fix names a role to create, or drops data
	}{
		{name: "rls not enabled", seed: `ALTER TABLE orders DISABLE ROW LEVEL SECURITY`, want: rlscheck.RLSDisabled},
		{name: "rls not forced", seed: `ALTER TABLE orders NO FORCE ROW LEVEL SECURITY`, want: rlscheck.RLSNotForced},
		{name: "no delete policy", seed: `DROP POLICY notes_delete ON notes`, want: rlscheck.PolicyMissing},
		{name: "only a restrictive policy", seed: `DROP POLICY events_open ON events`, want: rlscheck.PolicyMissing, count: 4},
		{name: "insert policy for another role", seed: `DROP POLICY notes_insert ON notes; CREATE POLICY notes_insert ON notes FOR INSERT TO %[2]s WITH CHECK (` + guardText + `)`, want: rlscheck.PolicyMissing},
		{name: "no setting", seed: `CREATE POLICY notes_mine ON notes FOR SELECT USING (body IS NOT NULL)`, want: rlscheck.PolicyNoSetting},
		{name: "another setting", seed: `ALTER POLICY notes_update ON notes USING (tenant_id = NULLIF(current_setting('app.tenant', true), ''))`, want: rlscheck.PolicyNoSetting},
		{name: "no missing_ok", seed: `ALTER POLICY notes_select ON notes USING (tenant_id = NULLIF(current_setting('racefree.tenant_id'), ''))`, want: rlscheck.PolicyNoMissingOK},
		{name: "missing_ok false", seed: `ALTER POLICY notes_delete ON notes USING (tenant_id = NULLIF(current_setting('racefree.tenant_id', false), ''))`, want: rlscheck.PolicyNoMissingOK},
		{name: "no nullif", seed: `ALTER POLICY notes_select ON notes USING (tenant_id = current_setting('racefree.tenant_id', true))`, want: rlscheck.PolicyNoNullIf},
		{name: "no nullif in with check", seed: `ALTER POLICY tenant ON orders WITH CHECK (tenant_id = current_setting('racefree.tenant_id', true)::uuid)`, want: rlscheck.PolicyNoNullIf},
		{name: "nullif on the wrong side", seed: `ALTER POLICY notes_select ON notes USING (tenant_id = NULLIF('', current_setting('racefree.tenant_id', true)))`, want: rlscheck.PolicyNoNullIf},
		{name: "coalesce matches everything", seed: `ALTER POLICY tenant ON orders USING (tenant_id = COALESCE(NULLIF(current_setting('racefree.tenant_id', true), '')::uuid, tenant_id))`, want: rlscheck.PolicyCoalesce},
		{name: "or true", seed: `ALTER POLICY tenant ON orders USING (` + guardUUID + ` OR true)`, want: rlscheck.PolicyAlwaysTrue},
		{name: "using true", seed: `CREATE POLICY notes_all ON notes FOR SELECT USING (true)`, want: rlscheck.PolicyAlwaysTrue},
		{name: "or 1 = 1", seed: `ALTER POLICY notes_update ON notes WITH CHECK (` + guardText + ` OR 1 = 1)`, want: rlscheck.PolicyAlwaysTrue},
		{name: "role owns table", seed: `ALTER TABLE notes OWNER TO %[1]s`, want: rlscheck.RoleOwnsTable, noFix: true},
		{name: "role is a member of the owner", seed: `GRANT %[2]s TO %[1]s`, want: rlscheck.RoleOwnsTable, count: 3},
		{name: "role bypasses rls", seed: `ALTER ROLE %[1]s BYPASSRLS`, want: rlscheck.RoleBypassesRLS},
		{name: "role is superuser", seed: `ALTER ROLE %[1]s SUPERUSER`, want: rlscheck.RoleBypassesRLS},
		{name: "role is a noinherit member of the owner", seed: `ALTER ROLE %[1]s NOINHERIT; GRANT %[2]s TO %[1]s`, want: rlscheck.RoleCanBecomeOwner},
		{name: "role is a member of a bypassrls role", seed: `ALTER ROLE %[3]s BYPASSRLS; GRANT %[3]s TO %[1]s`, want: rlscheck.RoleCanBecomeBypassRLS},
		{name: "role is a member of a superuser role", seed: `ALTER ROLE %[3]s SUPERUSER; GRANT %[3]s TO %[1]s`, want: rlscheck.RoleCanBecomeSuperuser},
		{name: "role reaches bypassrls through a chain", seed: `ALTER ROLE %[3]s BYPASSRLS; ALTER ROLE %[2]s NOINHERIT; GRANT %[3]s TO %[2]s; GRANT %[2]s TO %[1]s`, want: rlscheck.RoleCanBecomeBypassRLS, also: rlscheck.RoleOwnsTable, count: 4},
		{name: "role inherits the owner through a chain", seed: `GRANT %[2]s TO %[3]s; GRANT %[3]s TO %[1]s`, want: rlscheck.RoleOwnsTable, count: 3},
		{name: "role has createrole", seed: `ALTER ROLE %[1]s CREATEROLE`, want: rlscheck.RoleCanCreateRoles},
		{name: "role is a noinherit member of a createrole role", seed: `ALTER ROLE %[1]s NOINHERIT; ALTER ROLE %[3]s CREATEROLE; GRANT %[3]s TO %[1]s`, want: rlscheck.RoleCanCreateRoles},
		{name: "role is a member of pg_read_server_files", seed: `GRANT pg_read_server_files TO %[1]s`, want: rlscheck.RoleReachesServerFiles},
		{name: "role is a noinherit member of pg_write_server_files", seed: `ALTER ROLE %[1]s NOINHERIT; GRANT pg_write_server_files TO %[1]s`, want: rlscheck.RoleReachesServerFiles},
		{name: "role reaches pg_execute_server_program through a chain", seed: `ALTER ROLE %[1]s NOINHERIT; GRANT pg_execute_server_program TO %[3]s; GRANT %[3]s TO %[1]s`, want: rlscheck.RoleReachesServerFiles},
		{name: "noinherit member of a role with a wide-open policy", seed: `ALTER ROLE %[1]s NOINHERIT; GRANT %[4]s TO %[1]s`, want: rlscheck.PolicyAlwaysTrue},
		{name: "view without security_invoker", seed: `CREATE VIEW all_orders AS SELECT * FROM orders`, want: rlscheck.ViewNotInvoker},
		{name: "view with security_invoker false", seed: `CREATE VIEW all_notes WITH (security_invoker = false) AS SELECT * FROM notes`, want: rlscheck.ViewNotInvoker},
		{name: "view over an invoker view", seed: `CREATE VIEW big_totals AS SELECT * FROM order_totals WHERE total > 10`, want: rlscheck.ViewNotInvoker},
		{name: "materialized view", seed: `CREATE MATERIALIZED VIEW order_snapshot AS SELECT * FROM orders`, want: rlscheck.MaterializedView, noFix: true},
		{name: "security definer function", seed: `CREATE FUNCTION all_orders() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT count(*) FROM orders'`, want: rlscheck.DefinerReadsTenantTable},
		{name: "security definer sql body", seed: `CREATE FUNCTION all_notes() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER BEGIN ATOMIC SELECT count(*) FROM notes; END`, want: rlscheck.DefinerReadsTenantTable},
		{name: "security definer procedure", seed: `CREATE PROCEDURE purge(t uuid) LANGUAGE plpgsql SECURITY DEFINER AS $$BEGIN DELETE FROM Events WHERE tenant_id IS NULL; END$$`, want: rlscheck.DefinerReadsTenantTable},
		{name: "function made security definer", seed: `ALTER FUNCTION order_count() SECURITY DEFINER`, want: rlscheck.DefinerReadsTenantTable},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.exec(t, sprintf(c.seed, f.app, f.owner, f.group, f.admin))
			rep := f.check(t, rlscheck.Options{Role: f.app})
			count := c.count
			if count == 0 {
				count = 1
			}
			want := []rlscheck.Kind{c.want}
			if c.also != "" {
				want = append(want, c.also)
			}
			if got := kinds(rep); !slices.Equal(got, want) || len(rep.Findings) != count {
				t.Fatalf("kinds %v in %d findings, want %v in %d: %+v", got, len(rep.Findings), want, count, rep.Findings)
			}
			for _, fd := range rep.Findings {
				if fd.Object == "" || fd.Problem == "" || strings.Contains(fd.Problem, "\n") || fd.Fix == "" {
					t.Errorf("incomplete finding %+v", fd)
				}
			}
			if c.noFix {
				return
			}
			for _, fd := range rep.Findings {
				f.exec(t, fd.Fix)
			}
			if rep := f.check(t, rlscheck.Options{Role: f.app}); len(rep.Findings) != 0 {
				t.Fatalf("after the fixes: %+v", rep.Findings)
			}
		})
	}
}

// TestCheckFixQuotesNames: names that need quoting come out quoted, and the
// fix SQL runs.
func TestCheckFixQuotesNames(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.exec(t, `CREATE TABLE "Odd ""Name""" (id int, tenant_id uuid)`)
	rep := f.check(t, rlscheck.Options{Role: f.app})
	if got, want := kinds(rep), []rlscheck.Kind{rlscheck.RLSDisabled, rlscheck.RLSNotForced, rlscheck.PolicyMissing}; !slices.Equal(got, want) {
		t.Fatalf("kinds %v, want %v", got, want)
	}
	for _, fd := range rep.Findings {
		if !strings.Contains(fd.Fix, `."Odd ""Name"""`) {
			t.Errorf("fix %q does not quote the table", fd.Fix)
		}
		f.exec(t, fd.Fix)
	}
	if rep := f.check(t, rlscheck.Options{Role: f.app}); len(rep.Findings) != 0 {
		t.Fatalf("after the fixes: %+v", rep.Findings)
	}
}

func TestCheckOptions(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// Another column and setting: no table has app_id, so nothing is
	// checked, which is a finding (nothing is proven), with and without a
	// role.
	for _, role := range []string{f.app, ""} {
		rep := f.check(t, rlscheck.Options{TenantColumn: "app_id", Role: role})
		if got := kinds(rep); len(rep.Tables) != 0 || !slices.Equal(got, []rlscheck.Kind{rlscheck.NoTenantTable}) || len(rep.Findings) != 1 ||
			!strings.Contains(rep.Findings[0].Problem, `has the column "app_id"`) || len(rep.Warnings) != 0 {
			t.Fatalf("app_id, role %q: %+v", role, rep)
		}
	}
	// Policies reading another setting than the one asked for do not read
	// the setting.
	rep := f.check(t, rlscheck.Options{Setting: "app.tenant", Role: f.app})
	if got := kinds(rep); !slices.Equal(got, []rlscheck.Kind{rlscheck.PolicyAlwaysTrue, rlscheck.PolicyNoSetting}) { // events_open is no longer covered by a guard
		t.Fatalf("setting app.tenant: kinds %v", got)
	}
	// An explicit schema; public holds none of the fixture's tables.
	if rep := f.check(t, rlscheck.Options{Schemas: []string{rep.Schemas[0]}, Role: f.app}); len(rep.Tables) != 3 || len(rep.Findings) != 0 {
		t.Fatalf("explicit schema: %+v", rep)
	}
	for _, o := range []rlscheck.Options{
		{Role: "rf_rls_no_such_role"},
		{Schemas: []string{"rf_rls_no_such_schema"}},
		{Setting: "nodot"},
		{Setting: "trailing."},
		{TenantColumn: "tenant\x00id"},
		{TenantColumn: strings.Repeat("x", 64)},
		{Role: "bad\nrole"},
	} {
		_, err := rlscheck.New(f.db).Check(context.Background(), o)
		if !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("%+v: %v, want an InputError", o, err)
		}
	}
}

// TestCheckTimesOut: a check held up ends after Checker.Timeout with an
// error. Here pg_get_expr waits for an ACCESS SHARE lock on a policy's
// table that a migration holds in ACCESS EXCLUSIVE mode.
func TestCheckTimesOut(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `LOCK TABLE orders IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	c := rlscheck.New(f.db)
	c.Timeout = 300 * time.Millisecond
	start := time.Now()
	_, err = c.Check(ctx, rlscheck.Options{Role: f.app})
	if err == nil || !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %s", d)
	}
}

func TestCheckRefusesSQLite(t *testing.T) {
	t.Parallel()
	if _, err := rlscheck.Open("sqlite:app.db"); !errors.Is(err, rlscheck.ErrNotPostgres) {
		t.Fatalf("Open: %v", err)
	}
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	if _, err := rlscheck.Check(context.Background(), db, rlscheck.Options{}); !errors.Is(err, rlscheck.ErrNotPostgres) {
		t.Fatalf("Check: %v", err)
	}
}

func sprintf(format string, args ...any) string {
	if !strings.Contains(format, "%[") {
		return format
	}
	var pairs []string
	for i, a := range args {
		pairs = append(pairs, fmt.Sprintf("%%[%d]s", i+1), a.(string))
	}
	return strings.NewReplacer(pairs...).Replace(format)
}

func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestCheckFollowsDefiners: a SECURITY DEFINER function is followed into
// what it calls (any security) and reads (views, security_invoker or not,
// nested), to a tenant table at any depth, and the finding names the path;
// where it cannot be followed (EXECUTE, a language rls-check cannot read)
// that is a finding of its own. With and without a role, the same; the
// fix (SECURITY INVOKER) clears it.
func TestCheckFollowsDefiners(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, seed string
		want       rlscheck.Kind // "" for none
		path       string        // in the problem
	}{
		{name: "through a helper function", want: rlscheck.DefinerReadsTenantTable, path: `"api_count"() → "public"."helper_count"() → "public"."notes"`,
			seed: `CREATE FUNCTION helper_count() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM notes';
CREATE FUNCTION api_count() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT helper_count()'`},
		{name: "through a plpgsql helper", want: rlscheck.DefinerReadsTenantTable, path: `"api_events"() → "public"."event_count"() → "public"."events"`,
			seed: `CREATE FUNCTION event_count() RETURNS bigint LANGUAGE plpgsql STABLE AS $$DECLARE n bigint; BEGIN n := (SELECT count(*) FROM events); RETURN n; END$$;
CREATE FUNCTION api_events() RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $$BEGIN PERFORM event_count(); END$$`},
		{name: "through helpers in a sql-standard body", want: rlscheck.DefinerReadsTenantTable, path: `"api_deep"() → "public"."level1"() → "public"."level2"() → "public"."orders"`,
			seed: `CREATE FUNCTION level2() RETURNS bigint LANGUAGE sql STABLE BEGIN ATOMIC SELECT count(*) FROM orders; END;
CREATE FUNCTION level1() RETURNS bigint LANGUAGE sql STABLE RETURN level2() + 1;
CREATE FUNCTION api_deep() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER RETURN level1()`},
		{name: "through a security_invoker view", want: rlscheck.DefinerReadsTenantTable, path: `"api_totals"() → "public"."order_totals" → "public"."orders"`,
			seed: `CREATE FUNCTION api_totals() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT sum(total)::bigint FROM order_totals'`},
		{name: "through nested views", want: rlscheck.DefinerReadsTenantTable, path: `"api_nested"() → "public"."v2" → "public"."v1" → "public"."order_totals" → "public"."orders"`,
			seed: `CREATE VIEW v1 WITH (security_invoker = true) AS SELECT * FROM order_totals;
CREATE VIEW v2 WITH (security_invoker = true) AS SELECT * FROM v1 WHERE total > 0;
CREATE FUNCTION api_nested() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER BEGIN ATOMIC SELECT count(*) FROM v2; END`},
		{name: "through a view that calls a function", want: rlscheck.DefinerReadsTenantTable, path: `"api_codes"() → "public"."codes_with_orders" → "public"."order_count"() → "public"."orders"`,
			seed: `CREATE VIEW codes_with_orders WITH (security_invoker = true) AS SELECT code, order_count() AS orders FROM countries;
CREATE FUNCTION api_codes() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT count(*) FROM codes_with_orders'`},
		{name: "dynamic sql", want: rlscheck.DefinerNotFollowed, path: `"api_dynamic"(t text): it runs SQL built at run time (EXECUTE)`,
			seed: `CREATE FUNCTION api_dynamic(t text) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER AS $$DECLARE n bigint; BEGIN EXECUTE 'SELECT count(*) FROM ' || quote_ident(t) INTO n; RETURN n; END$$`},
		{name: "dynamic sql in a helper", want: rlscheck.DefinerNotFollowed, path: `"api_helped"() → "public"."count_of"(t text): it runs SQL built at run time`,
			seed: `CREATE FUNCTION count_of(t text) RETURNS bigint LANGUAGE plpgsql AS $$DECLARE n bigint; BEGIN EXECUTE format('SELECT count(*) FROM %I', t) INTO n; RETURN n; END$$;
CREATE FUNCTION api_helped() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS $$SELECT count_of('countries')$$`},
		{name: "dynamic query returned", want: rlscheck.DefinerNotFollowed, path: `"api_rows"(): it opens or returns a query built at run time`,
			seed: `CREATE FUNCTION api_rows() RETURNS SETOF bigint LANGUAGE plpgsql SECURITY DEFINER AS $$BEGIN RETURN QUERY EXECUTE 'SELECT id FROM orders'; END$$`},
		{name: "a language it cannot read", want: rlscheck.DefinerNotFollowed, path: `"api_clock"() → "public"."my_now"(): written in internal`,
			seed: `CREATE FUNCTION my_now() RETURNS timestamptz LANGUAGE internal STABLE AS 'now';
CREATE FUNCTION api_clock() RETURNS timestamptz LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT my_now()'`},
		{name: "an unqualified name resolves anywhere", want: rlscheck.DefinerReadsTenantTable, path: `"api_other"() → "public"."orders"`,
			seed: `CREATE SCHEMA other; CREATE FUNCTION other.api_other() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER AS 'SELECT count(*) FROM orders'`},
		{name: "a pinned search path elsewhere", seed: `CREATE SCHEMA other; CREATE TABLE other.orders (id int);
CREATE FUNCTION other.api_pinned() RETURNS bigint LANGUAGE sql STABLE SECURITY DEFINER SET search_path = other AS 'SELECT count(*) FROM orders'`},
		{name: "helpers and views over other tables", seed: `CREATE FUNCTION code_count() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM country_codes';
CREATE FUNCTION api_codes() RETURNS bigint LANGUAGE plpgsql STABLE SECURITY DEFINER AS $$BEGIN RETURN code_count() + country_count(); END$$`},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.exec(t, c.seed)
			for _, role := range []string{f.app, ""} {
				rep := f.check(t, rlscheck.Options{Role: role})
				var fds []rlscheck.Finding
				for _, fd := range rep.Findings {
					if fd.Kind != rlscheck.PolicyAlwaysTrue { // admin_all, without a role
						fds = append(fds, fd)
					}
				}
				if c.want == "" {
					if len(fds) != 0 {
						t.Fatalf("role %q: %+v, want none", role, fds)
					}
					continue
				}
				if len(fds) != 1 || fds[0].Kind != c.want || !strings.Contains(fds[0].Problem, c.path) {
					t.Fatalf("role %q: %+v, want one %s naming %s", role, fds, c.want, c.path)
				}
			}
			if c.want == "" {
				return
			}
			rep := f.check(t, rlscheck.Options{Role: f.app})
			f.exec(t, rep.Findings[0].Fix)
			if rep := f.check(t, rlscheck.Options{Role: f.app}); len(rep.Findings) != 0 {
				t.Fatalf("after the fix: %+v", rep.Findings)
			}
		})
	}
}
