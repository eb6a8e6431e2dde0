package server_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/getorcreate"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/postgres"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// TestStrictModeRefusesEveryWriteWithoutASynchronousStandby: with
// racefree.Config.RequireSynchronousReplication, on a primary whose
// standby streams asynchronously (testdb.NewCluster), every write route
// answers 503 not-durable with Retry-After, and every write of the
// library (claims on the pool and in a transaction, dedup, the inbox with
// and without a processing function, quotas, tokens, sequences, the
// outbox, API keys, get-or-create and the application's own write in
// tenant.InTx) fails with an error matching racefree.ErrNotDurable; not
// one row of racefree's tables changes, for the superuser (whom
// row-level security does not bind) and for an application role, with
// the combiner off and on, and again once the standby fell back to
// asynchronous after writes passed (the process then knows the tenants,
// and writes pipeline and combine). The doctor reports strict-refuses-writes and
// /readyz says the mode is on. Once the standby is synchronous
// (synchronous_standby_names = '*'), the same writes pass; an
// application role that cannot read pg_stat_replication's sync_state
// (no pg_read_all_stats) is still refused: it cannot see that a standby
// waits, so it fails closed.
func TestStrictModeRefusesEveryWriteWithoutASynchronousStandby(t *testing.T) {
	c := testdb.NewCluster(t)
	ctx := context.Background()
	owner := c.Primary.Open(t, nil)
	p := c.Primary.DB(t)
	app := c.AppRole(t, owner)
	blind := c.AppRole(t, owner) // no pg_read_all_stats
	// The privileges of pg_read_all_stats, not only membership: AppRole
	// makes NOINHERIT roles.
	if _, err := p.Exec(`GRANT pg_read_all_stats TO ` + app + `; ALTER ROLE ` + app + ` INHERIT`); err != nil {
		t.Fatal(err)
	}
	auth := []string{"Authorization", "Bearer s3cret-token"}
	opts := func() server.Options {
		return server.Options{Token: "s3cret-token", AuditKeys: auditRing(t, true),
			InboxSecrets: map[string][]string{"stripe": {secret}}}
	}
	// State to write on: a claim held at fence 1, a sequence, an audit
	// chain, a dead outbox message, an application table.
	s := server.New(owner, opts())
	for _, r := range []struct{ path, body string }{
		{"/v1/claims/nightly", `{"holder":"w1","ttl_ms":3600000}`},
		{"/v1/sequences/invoices/2026/next", `{}`},
		{"/v1/audit", `{"scope":"billing","actor":"ops","action":"refund","subject":"order-1"}`},
	} {
		if code, body, _ := do(t, s.Handler(), "POST", r.path, r.body, auth...); code != 200 {
			t.Fatalf("POST %s: %d %v", r.path, code, body)
		}
	}
	o, _ := s.Outbox()
	dead := killOne(t, o, ctx, "hooks")
	if _, err := p.Exec(`CREATE TABLE strict_users (email text PRIMARY KEY, name text NOT NULL);
		GRANT SELECT, INSERT ON strict_users TO ` + app + `, ` + blind); err != nil {
		t.Fatal(err)
	}
	acme, _ := tenant.With(ctx, "acme")

	routes := []struct {
		method, path, body string
		header             []string
	}{
		{"POST", "/v1/claims/nightly", `{"holder":"w2","ttl_ms":60000}`, auth},
		{"POST", "/v1/claims/other", `{"holder":"w2","ttl_ms":60000}`, append([]string{"Idempotency-Key", `"k1"`}, auth...)},
		{"POST", "/v1/claims/nightly/renew", `{"holder":"w1","fence":1,"ttl_ms":60000}`, auth},
		{"POST", "/v1/events", `{"source":"s","level":"l","message":"m"}`, auth},
		{"POST", "/v1/sequences/invoices/2026/next", `{}`, auth},
		{"POST", "/v1/audit", `{"scope":"billing","actor":"ops","action":"refund"}`, auth},
		{"POST", "/v1/audit/checkpoints", `{"scope":"billing"}`, auth},
		{"POST", "/v1/quotas/user-42/consume", `{"policy":{"kind":"window","rate":10,"per_ms":3600000}}`, auth},
		{"POST", "/v1/tokens", `{"purpose":"p","subject":"s","ttl_ms":60000}`, auth},
		{"POST", "/v1/outbox", `{"topic":"mail"}`, auth},
		{"POST", "/v1/outbox/dead/" + fmtID(dead) + "/redrive", "", auth},
		{"POST", "/v1/inbox/stripe", `{}`, nil},
		{"DELETE", "/v1/claims/nightly?holder=w1&fence=1", "", auth},
	}
	library := []struct {
		name  string
		write func(db *racefree.DB, n string) error
	}{
		{"claim on the pool", func(db *racefree.DB, n string) error {
			_, err := claim.New(db).Acquire(acme, db, "job"+n, "h", time.Minute)
			return err
		}},
		{"claim in tenant.InTx", func(db *racefree.DB, n string) error {
			return tenant.InTx(ctx, db, "acme", func(ctx context.Context, tx *sql.Tx) error {
				_, err := claim.New(db).Acquire(ctx, tx, "tx"+n, "h", time.Minute)
				return err
			})
		}},
		{"dedup", func(db *racefree.DB, n string) error {
			_, err := dedup.New(db).Observe(acme, db, dedup.Event{Source: "s", Level: "l", Message: "m" + n}, 0)
			return err
		}},
		{"inbox without fn", func(db *racefree.DB, n string) error {
			in, _ := inbox.New(db, nil)
			_, err := in.Receive(acme, "s", "e"+n, nil, nil)
			return err
		}},
		{"inbox with fn", func(db *racefree.DB, n string) error {
			in, _ := inbox.New(db, nil)
			_, err := in.Receive(acme, "s", "f"+n, nil, func(*sql.Tx) error { return nil })
			return err
		}},
		{"quota", func(db *racefree.DB, n string) error {
			l, _ := quota.New(db, nil)
			_, err := l.Consume(acme, db, "u"+n, 1, quota.Policy{Kind: quota.FixedWindow, Rate: 10, Per: time.Hour})
			return err
		}},
		{"token", func(db *racefree.DB, n string) error {
			st, err := onetime.New(db, &onetime.Options{Secret: []byte("0123456789abcdef0123456789abcdef")})
			if err != nil {
				return err
			}
			_, err = st.Issue(acme, db, "p", "s"+n, time.Minute)
			return err
		}},
		{"sequence", func(db *racefree.DB, n string) error {
			_, err := seq.New(db).Next(acme, db, "s", "n"+n)
			return err
		}},
		{"outbox", func(db *racefree.DB, n string) error {
			ob, _ := outbox.New(db, nil)
			_, err := ob.Enqueue(acme, db, outbox.Message{Topic: "t" + n})
			return err
		}},
		{"api key", func(db *racefree.DB, n string) error {
			ks, err := apikey.New(db, nil)
			if err != nil {
				return err
			}
			_, err = ks.Create(ctx, "acme", apikey.Read, "k"+n)
			return err
		}},
		{"get-or-create in tenant.InTx", func(db *racefree.DB, n string) error {
			return tenant.InTx(ctx, db, "acme", func(ctx context.Context, tx *sql.Tx) error {
				var name string
				_, err := getorcreate.Do(ctx, tx, getorcreate.Query{
					Insert:     `INSERT INTO strict_users (email, name) VALUES ($1, 'n') ON CONFLICT (email) DO NOTHING RETURNING name`,
					InsertArgs: []any{"u" + n + "@example.com"},
					Select:     `SELECT name FROM strict_users WHERE email = $1`, SelectArgs: []any{"u" + n + "@example.com"},
				}, func(r *sql.Row) error { return r.Scan(&name) })
				return err
			})
		}},
	}
	strictDBs := func(t *testing.T) map[string]*racefree.DB {
		out := map[string]*racefree.DB{}
		for _, v := range []struct {
			name, url string
			combine   bool
		}{
			{"superuser", c.Primary.URL, false},
			{"app role, combining", c.Primary.URLAs(app), true},
		} {
			out[v.name] = openStrict(t, v.url, v.combine)
		}
		return out
	}
	refused := func(t *testing.T, db *racefree.DB, n, why string) {
		t.Helper()
		before := racefreeRows(t, p)
		h := server.New(db, opts()).Handler()
		for i, r := range routes {
			header := r.header
			if header == nil {
				header = webhook(t, secret, "evt_"+n+fmtID(int64(i)), time.Now(), `{}`)
			}
			code, body, hdr := do(t, h, r.method, r.path, r.body, header...)
			if code != http.StatusServiceUnavailable || body["type"] != server.ProblemType("not-durable") || hdr.Get("Retry-After") == "" {
				t.Errorf("%s %s: %d %v, want 503 not-durable with Retry-After", r.method, r.path, code, body)
			}
		}
		for _, w := range library {
			var nd *racefree.NotDurableError
			if err := w.write(db, n); !errors.Is(err, racefree.ErrNotDurable) || !errors.As(err, &nd) || !strings.Contains(nd.Reason, why) {
				t.Errorf("%s: %v, want racefree.ErrNotDurable saying %q", w.name, err, why)
			}
		}
		if after := racefreeRows(t, p); after != before {
			t.Errorf("refused writes changed racefree's tables:\nbefore %s\nafter  %s", before, after)
		}
	}

	// The same DBs in every phase: the last one meets the tenants the
	// process has recorded (pipelined and combined writes).
	dbs := strictDBs(t)
	t.Run("asynchronous", func(t *testing.T) {
		for name, db := range dbs {
			t.Run(name, func(t *testing.T) { refused(t, db, "a", "synchronous_standby_names is empty") })
		}
		db := dbs["superuser"]
		rep, err := doctor.Check(ctx, db, doctor.Options{})
		if err != nil || !hasFinding(rep, doctor.StrictRefusesWrites) {
			t.Errorf("doctor in strict mode on an asynchronous cluster: %v, %v, want %s", rep.Findings, err, doctor.StrictRefusesWrites)
		}
		if code, body, _ := do(t, server.New(db, opts()).Handler(), "GET", "/readyz", ""); code != 200 || body["require_synchronous_replication"] != true {
			t.Errorf("readyz in strict mode: %d %v, want 200 with require_synchronous_replication", code, body)
		}
	})

	testdb.ExecAll(t, p, `ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`)
	waitRow(t, p, `SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'`)

	t.Run("synchronous", func(t *testing.T) {
		for name, db := range dbs {
			t.Run(name, func(t *testing.T) {
				before := racefreeRows(t, p)
				h := server.New(db, opts()).Handler()
				for i, r := range routes {
					header := r.header
					if header == nil {
						header = webhook(t, secret, "evt_s"+name+fmtID(int64(i)), time.Now(), `{}`)
					}
					if code, body, _ := do(t, h, r.method, r.path, r.body, header...); code >= 500 {
						t.Errorf("%s %s with a synchronous standby: %d %v", r.method, r.path, code, body)
					}
				}
				for _, w := range library {
					if w.name == "api key" && name != "superuser" {
						continue // racefree keys create runs as the owner; the refused case runs for every role
					}
					if err := w.write(db, "s"+strings.ReplaceAll(name, " ", "")); err != nil {
						t.Errorf("%s with a synchronous standby: %v", w.name, err)
					}
				}
				if racefreeRows(t, p) == before {
					t.Error("writes with a synchronous standby changed nothing")
				}
				if rep, err := doctor.Check(ctx, db, doctor.Options{}); err != nil || hasFinding(rep, doctor.StrictRefusesWrites) {
					t.Errorf("doctor with a synchronous standby: %v, %v", rep.Findings, err)
				}
			})
		}
		t.Run("a role that cannot see sync_state", func(t *testing.T) {
			db := openStrict(t, c.Primary.URLAs(blind), false)
			refused(t, db, "b", "pg_read_all_stats")
		})
	})

	// The standby falls back to asynchronous (as pg_auto_failover does
	// while its standby is away): writes of tenants the process has
	// recorded, pipelined and combined, are refused too.
	testdb.ExecAll(t, p, `ALTER SYSTEM SET synchronous_standby_names = ''`, `SELECT pg_reload_conf()`)
	waitRow(t, p, `SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'async' AND state = 'streaming'`)
	t.Run("asynchronous again", func(t *testing.T) {
		for name, db := range dbs {
			t.Run(name, func(t *testing.T) { refused(t, db, "c", "synchronous_standby_names is empty") })
		}
	})
}

// openStrict opens url, migrated already, requiring synchronous
// replication.
func openStrict(t *testing.T, url string, combine bool) *racefree.DB {
	t.Helper()
	policy := racefree.CombineOff
	if combine {
		policy = racefree.CombineOn
	}
	db, err := postgres.Open(context.Background(), url, &racefree.Config{RequireSynchronousReplication: true, Combine: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// racefreeRows returns a digest of every row of racefree's tables (but
// the migrations'), read by the superuser.
func racefreeRows(t *testing.T, p *sql.DB) string {
	t.Helper()
	var parts []string
	for _, name := range testdb.Strings(t, p, `SELECT tablename FROM pg_tables WHERE schemaname = 'public'
		AND tablename LIKE 'racefree\_%' AND tablename <> 'racefree_schema_migrations' ORDER BY 1`) {
		parts = append(parts, `SELECT '`+name+`', count(*), md5(COALESCE(string_agg(r::text, ',' ORDER BY r::text), '')) FROM `+name+` AS r`)
	}
	rows, err := p.Query(strings.Join(parts, " UNION ALL "))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name, sum string
		var n int64
		if err := rows.Scan(&name, &n, &sum); err != nil {
			t.Fatal(err)
		}
		out = append(out, name+":"+fmtID(n)+":"+sum[:8])
	}
	return strings.Join(out, " ")
}

func hasFinding(rep doctor.Report, code string) bool {
	for _, f := range rep.Findings {
		if f.Code == code {
			return true
		}
	}
	return false
}

// waitRow polls a query returning one boolean until it is true (a minute
// at most).
func waitRow(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var ok bool
		if err := db.QueryRow(query).Scan(&ok); err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", query)
		}
	}
}
