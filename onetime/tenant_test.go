package onetime_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/postgres"
	"github.com/racefree/racefree/tenant"
)

// as returns a context whose calls run for tenant id.
func as(t testing.TB, id string) context.Context {
	t.Helper()
	ctx, err := tenant.With(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

func sum(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// bind rewrites a query written with $n placeholders for db's engine.
func bind(db *racefree.DB, q string) string {
	if db.Engine() == racefree.SQLite {
		for i := 9; i >= 1; i-- {
			q = strings.ReplaceAll(q, fmt.Sprintf("$%d", i), fmt.Sprintf("?%d", i))
		}
	}
	return q
}

// exec runs a statement on db as the owner, outside racefree's calls.
func exec(t testing.TB, db *racefree.DB, q string, args ...any) int64 {
	t.Helper()
	res, err := db.ExecContext(context.Background(), bind(db, q), args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	n, _ := res.RowsAffected()
	return n
}

var tables = []string{"racefree_onetime_codes", "racefree_refresh_families", "racefree_refresh_retired"}

// rows counts the rows of tenant id ("" for every tenant) in the
// package's tables, read as the owner.
func rows(t testing.TB, owner *racefree.DB, id string) (n int) {
	t.Helper()
	for _, table := range tables {
		var c int
		q, args := `SELECT count(*) FROM `+table, []any{}
		if id != "" {
			q, args = bind(owner, q+` WHERE tenant = $1`), []any{id}
		}
		err := owner.QueryRowContext(context.Background(), q, args...).Scan(&c)
		if err != nil {
			t.Fatal(err)
		}
		n += c
	}
	return n
}

// snapshot returns every row of tenant id in the package's tables, read as
// the owner: on PostgreSQL the tests' owner is a superuser, which
// row-level security does not bind.
func snapshot(t testing.TB, owner *racefree.DB, id string) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT hash, purpose, subject, issued_at, expires_at, used_at, revoked_at FROM racefree_onetime_codes WHERE tenant = $1 ORDER BY hash`,
		`SELECT family, subject, ttl_ms, head, head_expires_at, prev, rotated_at, generation, created_at, revoked_at FROM racefree_refresh_families WHERE tenant = $1 ORDER BY family`,
		`SELECT hash, family, retired_at FROM racefree_refresh_retired WHERE tenant = $1 ORDER BY hash`,
	} {
		rs, err := owner.QueryContext(context.Background(), bind(owner, q), id)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rs.Columns()
		for rs.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rs.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%x\n", vals)
		}
		if err := rs.Close(); err != nil {
			t.Fatal(err)
		}
		b.WriteString("--\n")
	}
	return b.String()
}

// TestTenantsAreIsolated has two tenants use the same purposes, subjects
// and even the same token hashes and family: neither sees, changes or
// reaps the other's, and every operation of one leaves the other's rows as
// they were. It runs as the owner (on PostgreSQL a superuser, so the SQL's
// tenant filter alone keeps tenants apart) and, on PostgreSQL, as the
// application role, under row-level security.
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	testdb.EachRole(t, t0, func(t *testing.T, db, owner *racefree.DB, clock *racefree.ManualClock) {
		a, b := as(t, "acme"), as(t, "globex")
		s := newStore(t, db, &onetime.Options{Grace: time.Minute, Secret: secret})
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		// acme's rows live a second, globex's an hour.
		ca, err := s.Issue(a, db, "reset", "u", time.Second)
		must(err)
		ca2, err := s.Issue(a, db, "reset", "u", time.Second)
		must(err)
		cb, err := s.Issue(b, db, "reset", "u", time.Hour)
		must(err)
		fa, err := s.IssueRefresh(a, db, "u", time.Second)
		must(err)
		fb, err := s.IssueRefresh(b, db, "u", time.Hour)
		must(err)
		// globex also holds acme's code token and acme's family, same
		// hashes: keys lead with the tenant, so both may exist.
		ms := racefree.Millis(t0)
		exec(t, owner, `INSERT INTO racefree_onetime_codes (tenant, hash, purpose, subject, issued_at, expires_at) VALUES ('globex', $1, 'reset', 'u', $2, $3)`,
			sum(ca.Token), ms, ms+3_600_000)
		exec(t, owner, `INSERT INTO racefree_refresh_families (tenant, family, subject, ttl_ms, head, head_expires_at, generation, created_at)
			SELECT 'globex', family, subject, 3600000, head, $1, generation, created_at FROM racefree_refresh_families WHERE tenant = 'acme'`, ms+3_600_000)

		// Every operation of acme leaves globex's rows as they were.
		before := snapshot(t, owner, "globex")
		unchanged := func(op string) {
			t.Helper()
			if after := snapshot(t, owner, "globex"); after != before {
				t.Fatalf("%s for acme changed globex's rows:\n%s\nwas\n%s", op, after, before)
			}
		}
		outcome := func(op string, got, want onetime.Outcome, err error) {
			t.Helper()
			if err != nil || got != want {
				t.Fatalf("%s: %v, %v; want %v", op, got, err, want)
			}
			unchanged(op)
		}
		r, err := s.Consume(a, db, "reset", ca.Token)
		outcome("consume its code", r.Outcome, onetime.Consumed, err)
		r, err = s.Consume(a, db, "reset", cb.Token)
		outcome("consume globex's code", r.Outcome, onetime.Unknown, err)
		if n, err := s.RevokeCodes(a, db, "reset", "u"); err != nil || n != 1 {
			t.Fatalf("acme revoked %d codes, %v; want 1 (its live one)", n, err)
		}
		unchanged("revoke codes")
		rot, err := s.Rotate(a, db, fa.Token)
		outcome("rotate its family", rot.Outcome, onetime.Rotated, err)
		succA := rot.Next.Token
		rot, err = s.Rotate(a, db, fa.Token)
		outcome("retry in the grace window", rot.Outcome, onetime.Replayed, err)
		rot, err = s.Rotate(a, db, fb.Token)
		outcome("rotate globex's token", rot.Outcome, onetime.Unknown, err)
		if n, err := s.RevokeFamilies(a, db, "u"); err != nil || n != 1 {
			t.Fatalf("acme revoked %d families, %v; want 1", n, err)
		}
		unchanged("revoke families")
		rot, err = s.Rotate(a, db, succA)
		outcome("rotate a revoked family", rot.Outcome, onetime.Revoked, err)

		// globex's rows still work, its copy of acme's token and family
		// included; its successor differs from acme's (the tenant is in
		// the derivation). And globex leaves acme's rows as they were.
		beforeA := snapshot(t, owner, "acme")
		for _, tok := range []string{ca.Token, cb.Token} {
			if r, err := s.Consume(b, db, "reset", tok); err != nil || r.Outcome != onetime.Consumed {
				t.Fatalf("globex's code after acme's operations: %v, %v", r.Outcome, err)
			}
		}
		if r, err := s.Consume(b, db, "reset", ca2.Token); err != nil || r.Outcome != onetime.Unknown {
			t.Fatalf("acme's revoked code as globex: %v, %v; want unknown", r.Outcome, err)
		}
		rot, err = s.Rotate(b, db, fa.Token)
		if err != nil || rot.Outcome != onetime.Rotated || rot.Next.Token == succA {
			t.Fatalf("globex's copy of acme's family: %+v, %v; want rotated to another successor", rot, err)
		}
		rot, err = s.Rotate(b, db, fb.Token)
		if err != nil || rot.Outcome != onetime.Rotated {
			t.Fatalf("globex's family: %v, %v", rot.Outcome, err)
		}
		// globex's retired token presented to acme is unknown there, and
		// revokes nothing of globex's.
		before = snapshot(t, owner, "globex")
		rot, err = s.Rotate(a, db, fb.Token)
		outcome("present globex's retired token", rot.Outcome, onetime.Unknown, err)
		if after := snapshot(t, owner, "acme"); after != beforeA {
			t.Fatalf("globex's operations changed acme's rows:\n%s\nwas\n%s", after, beforeA)
		}

		// A reap deletes acme's expired rows and leaves globex's live ones.
		clock.Set(t0.Add(2 * time.Second))
		codes, families, err := s.Reap(context.Background(), 0, 0)
		if err != nil || codes != 2 || families != 1 {
			t.Fatalf("reap: %d codes, %d families, %v; want acme's 2 and 1", codes, families, err)
		}
		if n := rows(t, owner, "acme"); n != 0 {
			t.Fatalf("%d rows of acme left after the reap, want 0", n)
		}
		unchanged("the reap")
	})
}

// TestNullPrevOrRotatedAtIsReuse: reuse's grace test compares prev and
// rotated_at, which are NULL until a family's first rotation. A NULL on
// either must fall to the revoking branch, never to the grace one: the
// statement is written as "WHEN <every grace condition> THEN NULL ELSE
// now", so an unknown condition revokes. The rows are set by hand, as no
// operation leaves a retired token of a family without a rotation.
func TestNullPrevOrRotatedAtIsReuse(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, &onetime.Options{Grace: time.Hour, Secret: secret})
		for _, col := range []string{"prev", "rotated_at"} {
			f, err := s.IssueRefresh(ctx, db, "u", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			rot, err := s.Rotate(ctx, db, f.Token)
			if err != nil || rot.Outcome != onetime.Rotated {
				t.Fatalf("rotate: %v %v", rot.Outcome, err)
			}
			if n := exec(t, db, `UPDATE racefree_refresh_families SET `+col+` = NULL WHERE tenant = 'default' AND head = $1`, sum(rot.Next.Token)); n != 1 {
				t.Fatalf("%d families set, want 1", n)
			}
			// Within the grace window, the successor live: only the NULL
			// tells this retry from a replay.
			retry, err := s.Rotate(ctx, db, f.Token)
			if err != nil || retry.Outcome != onetime.Reused {
				t.Fatalf("%s NULL: retry %v, %v; want reused", col, retry.Outcome, err)
			}
			if after, err := s.Rotate(ctx, db, rot.Next.Token); err != nil || after.Outcome != onetime.Revoked {
				t.Fatalf("%s NULL: successor after the reuse %v, %v; want revoked", col, after.Outcome, err)
			}
		}
	})
}

// previousSuccessor is the previous release's successor derivation, for
// a Store of tenant Options.Tenant: the same as today's for the tenant a
// context names, so that a grace-window retry that crosses the rollout
// gets the successor it was first given.
func previousSuccessor(tenant string, parent []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("racefree onetime successor\x00"))
	m.Write([]byte(tenant))
	m.Write([]byte{0})
	m.Write(parent)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// TestPreviousReleaseRunsOnTheExpandedSchema runs the previous release's
// statements (testdata/previous, as at the branch base: its Store took the
// tenant from Options.Tenant, "default" unless set) against migration 011,
// beside this release's code: each sees the other's rows as the default
// tenant's.
func TestPreviousReleaseRunsOnTheExpandedSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		clock := racefree.NewManualClock(t0)
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Clock: clock})
		if _, err := db.MigrateUpTo(ctx, 11); err != nil {
			t.Fatal(err)
		}
		prev, err := query.Load(os.DirFS("testdata"), "previous", db.Engine())
		if err != nil {
			t.Fatal(err)
		}
		clk := wire.Of(db).ClockArg()
		ms := racefree.Millis(t0)
		const def = "default"

		// The previous release issues two codes and redeems one.
		var issued, expires int64
		for _, tok := range []string{"previous-code-1", "previous-code-2"} {
			if err := db.QueryRowContext(ctx, prev.Get("issue"), def, sum(tok), "login", "u", 3_600_000, clk).Scan(&issued, &expires); err != nil {
				t.Fatalf("previous issue: %v", err)
			}
			if issued != ms || expires != ms+3_600_000 {
				t.Fatalf("previous issue: %d, %d", issued, expires)
			}
		}
		var subject string
		var used int64
		if err := db.QueryRowContext(ctx, prev.Get("consume"), def, sum("previous-code-2"), "login", clk).Scan(&subject, &issued, &expires, &used); err != nil || subject != "u" || used != ms {
			t.Fatalf("previous consume: %q %d %v", subject, used, err)
		}
		// It starts a family and rotates it, as its Store did (on SQLite
		// rotate, then retire, in one transaction).
		var gen int64
		if err := db.QueryRowContext(ctx, prev.Get("issue_refresh"), def, sum("previous-refresh"), "u", 3_600_000, clk).Scan(&expires, &gen); err != nil || gen != 1 {
			t.Fatalf("previous issue_refresh: %d %v", gen, err)
		}
		succ := previousSuccessor(def, sum("previous-refresh"))
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			if db.Engine() == racefree.Postgres {
				return tx.QueryRowContext(ctx, prev.Get("rotate"), def, sum("previous-refresh"), sum(succ), clk).Scan(&subject, &expires, &gen)
			}
			var family []byte
			var rotatedAt int64
			if err := tx.QueryRowContext(ctx, prev.Get("rotate"), def, sum("previous-refresh"), sum(succ), clk).Scan(&subject, &expires, &gen, &family, &rotatedAt); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, prev.Get("retire"), def, sum("previous-refresh"), family, rotatedAt)
			return err
		})
		if err != nil || gen != 2 {
			t.Fatalf("previous rotate: %d %v", gen, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_refresh_retired WHERE tenant = 'default'`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d retired tokens of the default tenant, %v; want 1", n, err)
		}

		// This release sees them as the default tenant's (a context that
		// names no tenant).
		s := newStore(t, db, &onetime.Options{Grace: time.Minute, Secret: secret})
		if r, err := s.Consume(ctx, db, "login", "previous-code-1"); err != nil || r.Outcome != onetime.Consumed {
			t.Fatalf("a previous release's code: %v %v; want consumed", r.Outcome, err)
		}
		if r, err := s.Consume(ctx, db, "login", "previous-code-2"); err != nil || r.Outcome != onetime.AlreadyUsed || !r.UsedAt.Equal(t0) {
			t.Fatalf("a code the previous release redeemed: %+v %v; want already used at t0", r, err)
		}
		if r, err := s.Consume(as(t, tenant.Default), db, "login", "previous-code-1"); err != nil || r.Outcome != onetime.AlreadyUsed {
			t.Fatalf("as tenant.Default: %v %v", r.Outcome, err)
		}
		rot, err := s.Rotate(ctx, db, "previous-refresh")
		if err != nil || rot.Outcome != onetime.Replayed || rot.Next.Token != succ {
			t.Fatalf("retry of the previous release's rotation: %+v %v; want its successor replayed", rot, err)
		}
		if rot, err := s.Rotate(ctx, db, succ); err != nil || rot.Outcome != onetime.Rotated {
			t.Fatalf("the previous release's successor: %v %v; want rotated", rot.Outcome, err)
		}
		if rot, err := s.Rotate(ctx, db, "previous-refresh"); err != nil || rot.Outcome != onetime.Reused {
			t.Fatalf("a token the previous release retired: %v %v; want reused", rot.Outcome, err)
		}

		// And the previous release sees this release's rows.
		c, err := s.Issue(ctx, db, "login", "v", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, prev.Get("consume"), def, sum(c.Token), "login", clk).Scan(&subject, &issued, &expires, &used); err != nil || subject != "v" {
			t.Fatalf("previous consume of this release's code: %q %v", subject, err)
		}
		if r, err := s.Consume(ctx, db, "login", c.Token); err != nil || r.Outcome != onetime.AlreadyUsed {
			t.Fatalf("after the previous release redeemed it: %v %v", r.Outcome, err)
		}
		f, err := s.IssueRefresh(ctx, db, "v", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		res, err := db.ExecContext(ctx, prev.Get("revoke_families"), def, "v", clk)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("previous revoke_families: %d, want 1", n)
		}
		if rot, err := s.Rotate(ctx, db, f.Token); err != nil || rot.Outcome != onetime.Revoked {
			t.Fatalf("a family the previous release revoked: %v %v", rot.Outcome, err)
		}
		if n := rows(t, db, ""); n != rows(t, db, def) {
			t.Fatalf("rows outside the default tenant: %d of %d", n-rows(t, db, def), n)
		}
	})
}

// countingDB returns a fresh database on engine and, on PostgreSQL, the
// number of statements its connections have sent so far (a pgx tracer
// counts them on the wire). On SQLite it returns nil: count with an
// executor that wraps the transaction.
func countingDB(t *testing.T, engine string) (*racefree.DB, *atomic.Int64) {
	t.Helper()
	d := testdb.NewDSN(t, engine)
	if engine == racefree.SQLite {
		return testdb.Open(t, d, nil), nil
	}
	testdb.Open(t, d, nil) // migrated
	eng, err := postgres.NewEngine(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.SQL().Close() })
	cc, err := pgx.ParseConfig(d)
	if err != nil {
		t.Fatal(err)
	}
	tr := &tracer{}
	cc.Tracer = tr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := racefree.New(ctx, &traced{Engine: eng, db: stdlib.OpenDB(*cc)}, &racefree.Config{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, &tr.n
}

// traced is a PostgreSQL engine whose pool traces its statements.
type traced struct {
	*postgres.Engine
	db *sql.DB
}

func (e *traced) SQL() *sql.DB { return e.db }

type tracer struct{ n atomic.Int64 }

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	tr.n.Add(1)
	return ctx
}

func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
