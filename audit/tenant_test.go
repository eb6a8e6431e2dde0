package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// eachRole runs body on each engine as the database's owner (on
// PostgreSQL the test server's superuser, whom row-level security does not
// bind, so the tenant filter in the SQL alone keeps tenants apart) and, on
// PostgreSQL, also as the application role, which row-level security
// binds, on a database of its own. owner is the owner's handle, for
// reading every tenant's rows.
func eachRole(t *testing.T, cfg *racefree.Config, body func(t *testing.T, db, owner *racefree.DB)) {
	t.Helper()
	for _, engine := range testdb.Engines {
		t.Run(engine, func(t *testing.T) {
			t.Run("owner", func(t *testing.T) {
				owner := testdb.Open(t, testdb.NewDSN(t, engine), cfg)
				body(t, owner, owner)
			})
			if engine == racefree.Postgres {
				t.Run("app", func(t *testing.T) {
					d := testdb.NewDSN(t, engine)
					owner := testdb.Open(t, d, cfg)
					body(t, testdb.App(t, owner, d), owner)
				})
			}
		})
	}
}

func withTenant(t testing.TB, id string) context.Context {
	t.Helper()
	ctx, err := tenant.With(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

// tenantRows returns every row of the audit tables of tenant tn, as the
// owner reads them, one line per row.
func tenantRows(t testing.TB, owner *racefree.DB, tn string) string {
	t.Helper()
	ctx := context.Background()
	ph := "?"
	if owner.Engine() == racefree.Postgres {
		ph = "$1"
	}
	var b strings.Builder
	for _, q := range []string{
		`SELECT scope, last_seq, last_mac, key_id, cp_n, cp_hash FROM racefree_audit_heads WHERE tenant = ` + ph + ` ORDER BY scope`,
		`SELECT scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac FROM racefree_audit WHERE tenant = ` + ph + ` ORDER BY scope, seq`,
		`SELECT scope, n, seq, mac, at, prev, key_id, sig FROM racefree_audit_checkpoints WHERE tenant = ` + ph + ` ORDER BY scope, n`,
	} {
		rows, err := owner.QueryContext(ctx, q, tn)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				if bs, ok := v.([]byte); ok {
					v = hex.EncodeToString(bs)
				}
				fmt.Fprintf(&b, "%v|", v)
			}
			b.WriteString("\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		b.WriteString("--\n")
	}
	return b.String()
}

// TestTenantsAreIsolated: two tenants appending to the same scope have two
// chains: each numbers from 1, List, Scopes, Length, Checkpoints and
// Verify of one see only its own, every operation of one leaves the
// other's rows as they were, and on PostgreSQL an append held open in one
// tenant's transaction does not make the other's wait. As the owner (the
// SQL filter alone) and as the application role (row-level security
// too).
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	eachRole(t, nil, func(t *testing.T, db, owner *racefree.DB) {
		a, b, c := withTenant(t, "a"), withTenant(t, "b"), withTenant(t, "c")
		l := newLog(t, db, ring(t, "k1"))
		add := func(ctx context.Context, scope string, n int, firstSeq int64) {
			t.Helper()
			for i := range n {
				r, err := l.Append(ctx, db, scope, Entry{Actor: "alice", Action: fmt.Sprint("a", i), Subject: "doc"})
				if err != nil || r.Seq != firstSeq+int64(i) || r.Tenant != tenant.From(ctx) {
					t.Fatalf("%s: append to %s: %+v, %v; want seq %d", tenant.From(ctx), scope, r, err, firstSeq+int64(i))
				}
			}
		}
		// unchanged runs op and fails unless every tenant in others kept
		// its rows.
		unchanged := func(op func(), others ...string) {
			t.Helper()
			before := map[string]string{}
			for _, o := range others {
				before[o] = tenantRows(t, owner, o)
			}
			op()
			for _, o := range others {
				if after := tenantRows(t, owner, o); after != before[o] {
					t.Fatalf("an operation of another tenant changed %s's rows:\n%s\nwas\n%s", o, after, before[o])
				}
			}
		}
		unchanged(func() { add(a, "s", 3, 1); add(a, "only-a", 1, 1) }, "b", "c", tenant.Default)
		unchanged(func() { add(b, "s", 2, 1) }, "a", "c", tenant.Default)
		unchanged(func() { add(a, "s", 1, 4) }, "b")

		for _, w := range []struct {
			ctx    context.Context
			scopes []string
			length int64
		}{{a, []string{"only-a", "s"}, 4}, {b, []string{"s"}, 2}, {c, nil, 0}, {context.Background(), nil, 0}} {
			tn := tenant.From(w.ctx)
			if got, err := l.Scopes(w.ctx); err != nil || strings.Join(got, ",") != strings.Join(w.scopes, ",") {
				t.Fatalf("%s: scopes %v, %v; want %v", tn, got, err, w.scopes)
			}
			if n, err := l.Length(w.ctx, "s"); err != nil || n != w.length {
				t.Fatalf("%s: length %d, %v; want %d", tn, n, err, w.length)
			}
			rs, err := l.List(w.ctx, "s", 0, 100)
			if err != nil || int64(len(rs)) != w.length {
				t.Fatalf("%s: listed %d entries, %v; want %d", tn, len(rs), err, w.length)
			}
			for _, r := range rs {
				if r.Tenant != tn {
					t.Fatalf("%s: listed an entry of tenant %q", tn, r.Tenant)
				}
			}
			res, err := l.Verify(w.ctx, "s", nil)
			if err != nil || res.Break != nil || res.Rows != w.length || res.Tenant != tn {
				t.Fatalf("%s: verify %+v, %v; want intact, %d rows", tn, res, err, w.length)
			}
			all, err := l.VerifyAll(w.ctx, 2, nil)
			if err != nil || len(all) != len(w.scopes) {
				t.Fatalf("%s: verify all %+v, %v; want %d scopes", tn, all, err, len(w.scopes))
			}
		}

		var cpA, cpB Checkpoint
		unchanged(func() {
			var err error
			if cpA, err = l.Checkpoint(a, db, "s"); err != nil || cpA.N != 1 || cpA.Seq != 4 || cpA.Tenant != "a" {
				t.Fatalf("a's checkpoint %+v, %v; want number 1 of entry 4", cpA, err)
			}
		}, "b", "c")
		unchanged(func() {
			var err error
			if cpB, err = l.Checkpoint(b, db, "s"); err != nil || cpB.N != 1 || cpB.Seq != 2 || cpB.Tenant != "b" {
				t.Fatalf("b's checkpoint %+v, %v; want number 1 of entry 2", cpB, err)
			}
		}, "a", "c")
		if _, err := l.Checkpoint(c, db, "s"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("checkpoint of c's empty scope: %v; want ErrNotFound", err)
		}
		for _, w := range []struct {
			ctx context.Context
			cp  Checkpoint
		}{{a, cpA}, {b, cpB}} {
			cps, err := l.Checkpoints(w.ctx, "s", 0)
			if err != nil || len(cps) != 1 || !bytes.Equal(cps[0].Sig, w.cp.Sig) {
				t.Fatalf("%s: checkpoints %+v, %v", tenant.From(w.ctx), cps, err)
			}
			latest, err := l.LatestCheckpoint(w.ctx, "s")
			if err != nil || !bytes.Equal(latest.Sig, w.cp.Sig) || latest.Tenant != tenant.From(w.ctx) {
				t.Fatalf("%s: latest checkpoint %+v, %v", tenant.From(w.ctx), latest, err)
			}
			res, err := l.Verify(w.ctx, "s", &VerifyOptions{Checkpoints: cps})
			if err != nil || res.Break != nil || !res.Anchored {
				t.Fatalf("%s: verify against its checkpoint: %+v, %v", tenant.From(w.ctx), res, err)
			}
		}
		if _, err := l.LatestCheckpoint(c, "s"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("c's latest checkpoint: %v; want ErrNotFound", err)
		}
		// A tenant's transaction holds its own scopes only.
		unchanged(func() {
			err := tenant.InTx(context.Background(), db, "b", func(ctx context.Context, tx *sql.Tx) error {
				r, err := l.Append(ctx, tx, "s", Entry{Actor: "bob", Action: "in-tx"})
				if err == nil && r.Seq != 3 {
					err = fmt.Errorf("b's append in its transaction got %d; want 3", r.Seq)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}, "a", "c")
		wantIntact(t, verifyIn(a, t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cpA}}))
		if res := verifyIn(b, t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cpB}}); res.Break != nil || !res.Anchored || res.Rows != 3 {
			t.Fatalf("b after its transaction: %+v; want intact, anchored, 3 rows", res)
		}
		if db.Engine() != racefree.Postgres {
			return // one writer per file: every transaction waits for an open one
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if r, err := l.Append(a, tx, "s", Entry{Actor: "alice", Action: "held"}); err != nil || r.Seq != 5 {
			t.Fatalf("a's append in an open transaction: %+v, %v", r, err)
		}
		done := make(chan error, 1)
		go func() {
			r, err := l.Append(b, db, "s", Entry{Actor: "bob", Action: "not waiting"})
			if err == nil && r.Seq != 4 {
				err = fmt.Errorf("b's append got %d; want 4", r.Seq)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("b's append waited for a's open transaction")
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		for ctx, rows := range map[context.Context]int64{a: 5, b: 4} {
			if res := verifyIn(ctx, t, l, "s", nil); res.Break != nil || res.Rows != rows {
				t.Fatalf("%s: verify after the concurrent appends: %+v; want intact, %d rows", tenant.From(ctx), res, rows)
			}
		}
	})
}

// TestEntryMovedToAnotherTenantIsReported: three tenants (the default one
// among them) append the same entries at the same time to the same scope,
// so that only the tenant tells their entries apart. An entry copied from
// one tenant's chain into another's, MAC and prev_mac included, is
// reported modified, in each direction; the other chains stay intact.
func TestEntryMovedToAnotherTenantIsReported(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	testdb.Each(t, &racefree.Config{Clock: racefree.NewManualClock(at)}, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		tenants := []string{tenant.Default, "acme", "globex"}
		for _, tn := range tenants {
			for i := range tenants {
				appendIn(withTenant(t, tn), t, l, fmt.Sprint("s", i), 4)
			}
		}
		// In scope s<i>, entry i+2 of tenant i is copied over the same entry
		// of the next tenant.
		for i, from := range tenants {
			to, scope, seq := tenants[(i+1)%len(tenants)], fmt.Sprint("s", i), int64(i+2)
			wantIntact(t, verifyIn(withTenant(t, to), t, l, scope, nil))
			tamper(t, db,
				fmt.Sprintf(`DELETE FROM racefree_audit WHERE tenant = '%s' AND scope = '%s' AND seq = %d`, to, scope, seq),
				fmt.Sprintf(`INSERT INTO racefree_audit (tenant, scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac)
				 SELECT '%s', scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac FROM racefree_audit
				  WHERE tenant = '%s' AND scope = '%s' AND seq = %d`, to, from, scope, seq))
			wantBreak(t, verifyIn(withTenant(t, to), t, l, scope, nil), Modified, seq)
			wantIntact(t, verifyIn(withTenant(t, from), t, l, scope, nil))
		}
	})
}

// TestCheckpointOfAnotherTenantIsRefused: a checkpoint is bound to its
// tenant. One of another tenant is bad_checkpoint; relabelled with the
// verifying tenant, its signature fails; one exported before tenancy (no
// tenant in its JSON) is the default tenant's and still verifies.
func TestCheckpointOfAnotherTenantIsRefused(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	testdb.Each(t, &racefree.Config{Clock: racefree.NewManualClock(at)}, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		acme, globex := withTenant(t, "acme"), withTenant(t, "globex")
		cps := map[string]Checkpoint{}
		for _, ctx := range []context.Context{context.Background(), acme, globex} {
			appendIn(ctx, t, l, "s", 3)
			cp, err := l.Checkpoint(ctx, db, "s")
			if err != nil {
				t.Fatal(err)
			}
			cps[tenant.From(ctx)] = cp
		}
		for _, w := range []struct {
			name   string
			cp     Checkpoint
			detail string
		}{
			{"acme's checkpoint", cps["acme"], `of tenant "acme"`},
			{"the default tenant's checkpoint", cps[tenant.Default], `of tenant "default"`},
			{"acme's checkpoint relabelled", relabel(cps["acme"], "globex"), "bad signature"},
		} {
			res := verifyIn(globex, t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{w.cp}})
			if res.Break == nil || res.Break.Kind != BadCheckpoint || !strings.Contains(res.Break.Detail, w.detail) {
				t.Errorf("globex verified against %s: %+v; want %s, %q", w.name, res.Break, BadCheckpoint, w.detail)
			}
		}
		res := verifyIn(context.Background(), t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{relabel(cps["acme"], "")}})
		if res.Break == nil || res.Break.Kind != BadCheckpoint || !strings.Contains(res.Break.Detail, "bad signature") {
			t.Errorf("the default tenant verified against acme's checkpoint without its tenant: %+v; want a bad signature", res.Break)
		}
		// Exported before tenancy: no tenant field at all.
		var buf bytes.Buffer
		if err := WriteCheckpoints(&buf, relabel(cps[tenant.Default], "")); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(buf.String(), `"tenant"`) {
			t.Fatalf("a checkpoint without a tenant exported as %s", buf.String())
		}
		read, err := ReadCheckpoints(&buf)
		if err != nil || len(read) != 1 {
			t.Fatalf("read back: %+v, %v", read, err)
		}
		res = verifyIn(context.Background(), t, l, "s", &VerifyOptions{Checkpoints: read})
		if res.Break != nil || !res.Anchored {
			t.Fatalf("the default tenant against its checkpoint without a tenant: %+v; want intact, anchored", res)
		}
		for _, ctx := range []context.Context{acme, globex} {
			res := verifyIn(ctx, t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cps[tenant.From(ctx)]}})
			if res.Break != nil || !res.Anchored {
				t.Fatalf("%s against its own checkpoint: %+v", tenant.From(ctx), res)
			}
		}
	})
}

func relabel(c Checkpoint, tn string) Checkpoint {
	c.Tenant = tn
	return c
}

// TestOutdatedSchemaIsRefused: at schema 010 every operation is
// ErrSchemaOutdated and writes nothing; at 011 the default tenant's log
// works, another tenant's is ErrSchemaOutdated until 012.
func TestOutdatedSchemaIsRefused(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		acme := withTenant(t, "acme")
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion-1); err != nil {
			t.Fatal(err)
		}
		l := newLog(t, db, ring(t, "k1"))
		ops := func(ctx context.Context) map[string]error {
			_, appendErr := l.Append(ctx, db, "s", Entry{Actor: "a", Action: "b"})
			txErr := db.InTx(ctx, func(tx *sql.Tx) error {
				_, err := l.Append(ctx, tx, "s", Entry{Actor: "a", Action: "b"})
				return err
			})
			_, cpErr := l.Checkpoint(ctx, db, "s")
			_, listErr := l.List(ctx, "s", 0, 10)
			_, scopesErr := l.Scopes(ctx)
			_, lengthErr := l.Length(ctx, "s")
			_, verifyErr := l.Verify(ctx, "s", nil)
			_, cpsErr := l.Checkpoints(ctx, "s", 0)
			return map[string]error{"Append": appendErr, "Append in a transaction": txErr, "Checkpoint": cpErr, "List": listErr,
				"Scopes": scopesErr, "Length": lengthErr, "Verify": verifyErr, "Checkpoints": cpsErr}
		}
		for name, err := range ops(ctx) {
			if !errors.Is(err, racefree.ErrSchemaOutdated) {
				t.Errorf("%s on schema 010: %v; want ErrSchemaOutdated", name, err)
			}
		}
		for _, tb := range []string{"racefree_audit", "racefree_audit_heads", "racefree_audit_checkpoints"} {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+tb).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%s on schema 010: %d rows, %v; want none", tb, n, err)
			}
		}
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		appendIn(ctx, t, l, "s", 2)
		if _, err := l.Checkpoint(ctx, db, "s"); err != nil {
			t.Fatal(err)
		}
		wantIntact(t, verifyIn(ctx, t, l, "s", nil))
		if _, err := l.Append(acme, db, "s", Entry{Actor: "a", Action: "b"}); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("append of tenant acme on schema 011: %v; want ErrSchemaOutdated", err)
		}
		if _, err := l.Verify(acme, "s", nil); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("verify of tenant acme on schema 011: %v; want ErrSchemaOutdated", err)
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		appendIn(acme, t, l, "s", 1)
		wantIntact(t, verifyIn(acme, t, l, "s", nil))
		appendIn(ctx, t, l, "s", 1)
		if res := verifyIn(ctx, t, l, "s", nil); res.Break != nil || res.Rows != 3 {
			t.Fatalf("the default tenant after 012: %+v; want intact, 3 rows", res)
		}
	})
}

// TestPreviousReleaseRunsOnTheExpandedSchema: during a rollout, between
// migrations 011 and 012, the previous release's statements
// (testdata/previous, as they were before tenancy) still append, chain,
// list and checkpoint against the expanded schema, with the previous
// release's MAC and checkpoint encoding; this release verifies what they
// wrote as the default tenant's chain, anchored by their checkpoint, and
// continues it, and the previous statements continue it again. After 012
// the previous statements fail, and the chain still verifies.
func TestPreviousReleaseRunsOnTheExpandedSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		prev, err := query.Load(os.DirFS("testdata"), "previous", db.Engine())
		if err != nil {
			t.Fatal(err)
		}
		k := ring(t, "k1")
		l := newLog(t, db, k)
		// prevAppend is the previous release's Append: next, the MAC over
		// (version 1, scope, …) and insert, in one transaction.
		prevAppend := func(actor string, want int64) {
			t.Helper()
			err := db.InTx(ctx, func(tx *sql.Tx) error {
				var (
					seq, at int64
					prevMAC []byte
					keyID   string
				)
				if err := tx.QueryRowContext(ctx, prev.Get("next"), "s", k.current, wire.Of(db).ClockArg()).Scan(&seq, &prevMAC, &keyID, &at); err != nil {
					return err
				}
				if seq != want {
					return fmt.Errorf("previous next handed out %d; want %d", seq, want)
				}
				if prevMAC == nil {
					prevMAC = []byte{}
				}
				key, _ := k.scopeKey(keyID, "s")
				mac := previousMAC(key, "s", seq, prevMAC, at, actor, "act", "doc", []byte("{}"))
				_, err := tx.ExecContext(ctx, prev.Get("insert"), "s", seq, at, actor, "act", "doc", []byte("{}"), keyID, prevMAC, mac)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		prevAppend("old-1", 1)
		prevAppend("old-2", 2)
		// The previous release's Checkpoint, signed without a tenant.
		var cp Checkpoint
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			cp = Checkpoint{Scope: "s", KeyID: k.signer}
			var at int64
			if err := tx.QueryRowContext(ctx, prev.Get("checkpoint_head"), "s", wire.Of(db).ClockArg()).Scan(&cp.Seq, &cp.MAC, &cp.N, &cp.Prev, &at); err != nil {
				return err
			}
			if cp.Prev == nil {
				cp.Prev = []byte{}
			}
			cp.At = racefree.FromMillis(at)
			cp.Sig = ed25519.Sign(k.signers[k.signer], cp.signed())
			if _, err := tx.ExecContext(ctx, prev.Get("set_checkpoint"), "s", cp.N, cp.Seq, cp.MAC, at, cp.Prev, cp.KeyID, cp.Sig); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, prev.Get("set_checkpoint_hash"), "s", cp.N, cp.Hash())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// Its rows are the default tenant's.
		var tenants []string
		for _, tb := range []string{"racefree_audit", "racefree_audit_heads", "racefree_audit_checkpoints"} {
			var tn string
			var n int
			if err := db.QueryRowContext(ctx, `SELECT MIN(tenant), count(*) FROM `+tb).Scan(&tn, &n); err != nil {
				t.Fatal(err)
			}
			tenants = append(tenants, fmt.Sprint(tb, ":", tn, "×", n))
		}
		if got := strings.Join(tenants, " "); got != "racefree_audit:default×2 racefree_audit_heads:default×1 racefree_audit_checkpoints:default×1" {
			t.Fatalf("rows written by the previous release: %s", got)
		}
		// This release reads them as the default tenant's.
		res := verifyIn(ctx, t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp}})
		if res.Break != nil || !res.Anchored || res.Rows != 2 || res.Tenant != tenant.Default {
			t.Fatalf("the previous release's chain: %+v; want intact, anchored, 2 rows", res)
		}
		if stored, err := l.LatestCheckpoint(ctx, "s"); err != nil || !bytes.Equal(stored.Sig, cp.Sig) {
			t.Fatalf("the previous release's checkpoint: %+v, %v", stored, err)
		}
		if scopes, err := l.Scopes(ctx); err != nil || len(scopes) != 1 || scopes[0] != "s" {
			t.Fatalf("scopes: %v, %v", scopes, err)
		}
		appendIn(ctx, t, l, "s", 1) // entry 3
		cp2, err := l.Checkpoint(ctx, db, "s")
		if err != nil || cp2.N != 2 || !bytes.Equal(cp2.Prev, cp.Hash()) {
			t.Fatalf("a checkpoint after the previous release's: %+v, %v", cp2, err)
		}
		prevAppend("old-4", 4)
		// The previous release's reads see this release's entries.
		var rows int
		prevRows, err := db.QueryContext(ctx, prev.Get("entries"), "s", 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		for prevRows.Next() {
			rows++
		}
		prevRows.Close()
		var headSeq, cpN int64
		if err := db.QueryRowContext(ctx, prev.Get("head"), "s").Scan(&headSeq, &cpN); err != nil || rows != 4 || headSeq != 4 || cpN != 2 {
			t.Fatalf("previous entries and head: %d rows, head %d, %d checkpoints, %v; want 4, 4, 2", rows, headSeq, cpN, err)
		}
		res = verifyIn(ctx, t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp, cp2}})
		if res.Break != nil || !res.Anchored || res.Rows != 4 {
			t.Fatalf("the chain of both releases: %+v; want intact, anchored, 4 rows", res)
		}

		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		err = db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, prev.Get("next"), "s", k.current, wire.Of(db).ClockArg())
			return err
		})
		if err == nil {
			t.Fatal("the previous release's next ran after 012; want an error")
		}
		appendIn(ctx, t, l, "s", 1)
		res = verifyIn(ctx, t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{cp, cp2}})
		if res.Break != nil || !res.Anchored || res.Rows != 5 {
			t.Fatalf("the chain after 012: %+v; want intact, anchored, 5 rows", res)
		}
	})
}

// previousMAC is an entry's MAC as the previous release computed it, spelt
// out here rather than taken from this release's code: format version 1,
// then scope, seq, prev_mac, time, actor, action, subject and data, the
// byte strings length-prefixed (uvarint) and the numbers 8 bytes
// big-endian. No tenant field.
func previousMAC(key []byte, scope string, seq int64, prev []byte, at int64, actor, action, subject string, data []byte) []byte {
	field := func(buf, b []byte) []byte { return append(binary.AppendUvarint(buf, uint64(len(b))), b...) }
	buf := []byte{1}
	buf = field(buf, []byte(scope))
	buf = binary.BigEndian.AppendUint64(buf, uint64(seq))
	buf = field(buf, prev)
	buf = binary.BigEndian.AppendUint64(buf, uint64(at))
	buf = field(buf, []byte(actor))
	buf = field(buf, []byte(action))
	buf = field(buf, []byte(subject))
	buf = field(buf, data)
	m := hmac.New(sha256.New, key)
	m.Write(buf)
	return m.Sum(nil)
}
