package idempotency_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// onOwnerAndApp runs body on each engine against a fresh database opened
// as its owner (on PostgreSQL a superuser, whom row-level security does
// not bind: the filter in racefree's SQL is all that keeps tenants apart)
// and, on PostgreSQL, against another fresh database opened as the
// application role, which row-level security binds.
func onOwnerAndApp(t *testing.T, body func(t *testing.T, db *racefree.DB, clock *racefree.ManualClock)) {
	t.Helper()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		t.Run("owner", func(t *testing.T) {
			clock := racefree.NewManualClock(t0)
			body(t, testdb.Open(t, dsn, &racefree.Config{Clock: clock}), clock)
		})
		if !strings.HasPrefix(dsn, "postgres") {
			return
		}
		t.Run("app", func(t *testing.T) {
			dsn := testdb.NewDSN(t, racefree.Postgres)
			clock := racefree.NewManualClock(t0)
			owner := testdb.Open(t, dsn, &racefree.Config{Clock: clock})
			body(t, testdb.App(t, owner, dsn), clock)
		})
	})
}

func twoTenants(t *testing.T) (a, b context.Context) {
	t.Helper()
	a, err := tenant.With(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	b, err = tenant.With(context.Background(), "globex")
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestTenantsAreIndependent proves that two tenants using the same scope
// and key are two requests: neither replays, refuses or waits for the
// other's, neither resumes the other's recovery points, their step keys
// differ, and the reaper deletes the expired records of one and keeps the
// live ones of the other.
func TestTenantsAreIndependent(t *testing.T) {
	t.Parallel()
	onOwnerAndApp(t, func(t *testing.T, db *racefree.DB, clock *racefree.ManualClock) {
		acme, globex := twoTenants(t)
		s := idempotency.New(db, &idempotency.Options{Retention: time.Hour})
		do := func(ctx context.Context, key, fp, response string) *idempotency.Result {
			t.Helper()
			res, err := s.Do(ctx, "s", key, fp, func(context.Context, *idempotency.Call) ([]byte, error) { return []byte(response), nil })
			if err != nil {
				t.Fatalf("%s Do(%s, %s): %v", tenant.From(ctx), key, fp, err)
			}
			return res
		}
		// The same key with other fingerprints: each tenant runs its own.
		if res := do(acme, "k", "fp-a", "a1"); res.Replayed || string(res.Response) != "a1" {
			t.Fatalf("acme's first run: %+v", res)
		}
		if res := do(globex, "k", "fp-g", "g1"); res.Replayed || string(res.Response) != "g1" {
			t.Fatalf("globex, the same key after acme: %+v, want its own run", res)
		}
		if res := do(acme, "k", "fp-a", "a2"); !res.Replayed || string(res.Response) != "a1" {
			t.Fatalf("acme's retry: %+v, want the replay of a1", res)
		}
		if res := do(globex, "k", "fp-g", "g2"); !res.Replayed || string(res.Response) != "g1" {
			t.Fatalf("globex's retry: %+v, want the replay of g1", res)
		}
		if _, err := s.Do(acme, "s", "k", "fp-g", nil); !errors.Is(err, racefree.ErrMismatch) {
			t.Fatalf("acme with globex's fingerprint: %v, want its own mismatch", err)
		}

		// A key in progress in one tenant does not hold the other up, and
		// each completes its own record.
		started, finish, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			_, err := s.Do(acme, "s", "k2", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
				close(started)
				<-finish
				return []byte("a-k2"), nil
			})
			done <- err
		}()
		<-started
		if _, err := s.Do(acme, "s", "k2", "fp", nil); !errors.Is(err, racefree.ErrInProgress) {
			t.Fatalf("acme's duplicate in flight: %v, want ErrInProgress", err)
		}
		if res := do(globex, "k2", "fp", "g-k2"); res.Replayed || string(res.Response) != "g-k2" {
			t.Fatalf("globex while acme's k2 is in progress: %+v, want its own run", res)
		}
		close(finish)
		if err := <-done; err != nil {
			t.Fatalf("acme's k2: %v", err)
		}
		if res := do(acme, "k2", "fp", "x"); !res.Replayed || string(res.Response) != "a-k2" {
			t.Fatalf("acme's k2 replay: %+v, want a-k2", res)
		}
		if res := do(globex, "k2", "fp", "x"); !res.Replayed || string(res.Response) != "g-k2" {
			t.Fatalf("globex's k2 replay: %+v, want g-k2", res)
		}

		// Recovery points and step keys are per tenant.
		stepKeys := map[string]string{}
		charge := func(ctx context.Context, fail bool) (value string, resumed int) {
			t.Helper()
			_, err := s.Do(ctx, "s", "k3", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
				stepKeys[tenant.From(ctx)] = call.StepKey("charge")
				v, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_" + tenant.From(ctx), nil })
				if err != nil {
					return nil, err
				}
				value, resumed = v, call.ResumedSteps
				if fail {
					return nil, errors.New("crash after the charge")
				}
				return []byte(v), nil
			})
			if fail != (err != nil) {
				t.Fatalf("%s k3: %v", tenant.From(ctx), err)
			}
			return value, resumed
		}
		if v, n := charge(acme, true); v != "ch_acme" || n != 0 {
			t.Fatalf("acme's first charge: %q, %d resumed", v, n)
		}
		if v, n := charge(globex, false); v != "ch_globex" || n != 0 {
			t.Fatalf("globex's charge after acme's: %q, %d resumed; want its own, not acme's", v, n)
		}
		if v, n := charge(acme, false); v != "ch_acme" || n != 1 {
			t.Fatalf("acme's retry: %q, %d resumed; want ch_acme resumed", v, n)
		}
		if stepKeys["acme"] == stepKeys["globex"] {
			t.Fatalf("acme and globex share the step key %s", stepKeys["acme"])
		}

		// DoTx in each tenant's own transaction.
		for _, ctx := range []context.Context{acme, globex} {
			err := tenant.InTx(ctx, db, tenant.From(ctx), func(ctx context.Context, tx *sql.Tx) error {
				res, err := s.DoTx(ctx, tx, "s", "k4", "fp-"+tenant.From(ctx), func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) {
					return []byte("tx-" + tenant.From(ctx)), nil
				})
				if err == nil && (res.Replayed || string(res.Response) != "tx-"+tenant.From(ctx)) {
					t.Errorf("%s DoTx: %+v, want its own run", tenant.From(ctx), res)
				}
				return err
			})
			if err != nil {
				t.Fatalf("%s DoTx: %v", tenant.From(ctx), err)
			}
		}

		// The middleware: the tenant of the request's context.
		h := s.Middleware(idempotency.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(tenant.From(r.Context())))
		}))
		for _, ctx := range []context.Context{acme, globex, acme} {
			req := httptest.NewRequest("POST", "/v1/orders", strings.NewReader(tenant.From(ctx))).WithContext(ctx)
			req.Header.Set("Idempotency-Key", `"order-1"`)
			req.Header.Set("Authorization", "Bearer same")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated || rec.Body.String() != tenant.From(ctx) {
				t.Fatalf("%s POST: %d %s, want 201 with its own body", tenant.From(ctx), rec.Code, rec.Body)
			}
		}

		// Half an hour later globex completes one more; an hour after the
		// start everything else has expired. The reaper takes the expired
		// records of both tenants and keeps globex's live one.
		clock.Advance(30 * time.Minute)
		do(globex, "k5", "fp", "g-k5")
		clock.Advance(30 * time.Minute)
		if n, err := s.Reap(context.Background(), 1); err != nil || n != 12 {
			// acme: k, k2, k3, k4, the middleware's record and the step;
			// globex: the same.
			t.Fatalf("Reap: %d, %v; want 12 records and steps", n, err)
		}
		if res := do(globex, "k5", "fp", "x"); !res.Replayed || string(res.Response) != "g-k5" {
			t.Fatalf("globex's live k5 after the reap: %+v, want its replay", res)
		}
		if res := do(acme, "k5", "fp", "a-k5"); res.Replayed {
			t.Fatalf("acme's k5, never run: %+v, want a run", res)
		}
		if res := do(acme, "k", "fp-g", "a3"); res.Replayed || string(res.Response) != "a3" {
			t.Fatalf("acme's reaped k: %+v, want a fresh run", res)
		}
	})
}

// TestDefaultTenantStepKeysAreUnchanged proves that a request begun before
// tenancy gets the same step keys after it (an external system already
// holds them), and that other tenants' are not the default's.
func TestDefaultTenantStepKeysAreUnchanged(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		acme, _ := twoTenants(t)
		keys := map[string]string{}
		for _, ctx := range []context.Context{context.Background(), acme} {
			_, err := b.store.Do(ctx, "s", "k", "fp", func(_ context.Context, call *idempotency.Call) ([]byte, error) {
				keys[tenant.From(ctx)] = call.StepKey("charge")
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		h := sha256.Sum256([]byte("s\x00k\x00charge"))
		if got, want := keys[tenant.Default], hex.EncodeToString(h[:16]); got != want {
			t.Fatalf("the default tenant's StepKey is %s, want %s as before tenancy", got, want)
		}
		if keys["acme"] == keys[tenant.Default] {
			t.Fatalf("acme's StepKey is the default tenant's")
		}
	})
}

// TestBeforeTenantsEveryCallIsSchemaOutdated proves that below migration
// 011 every call fails with ErrSchemaOutdated and writes nothing, and
// that at 011 the default tenant works (other tenants need 012).
func TestBeforeTenantsEveryCallIsSchemaOutdated(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		db := testdb.Open(t, dsn, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion-1); err != nil {
			t.Fatal(err)
		}
		s := idempotency.New(db, nil)
		ran := false
		fn := func(context.Context, *idempotency.Call) ([]byte, error) { ran = true; return []byte("ok"), nil }
		if _, err := s.Do(ctx, "s", "k", "fp", fn); !errors.Is(err, racefree.ErrSchemaOutdated) || ran {
			t.Fatalf("Do at 010: %v, fn ran %v; want ErrSchemaOutdated", err, ran)
		}
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			_, err := s.DoTx(ctx, tx, "s", "k", "fp", func(context.Context, *sql.Tx, *idempotency.Call) ([]byte, error) {
				ran = true
				return nil, nil
			})
			return err
		})
		if !errors.Is(err, racefree.ErrSchemaOutdated) || ran {
			t.Fatalf("DoTx at 010: %v, fn ran %v; want ErrSchemaOutdated", err, ran)
		}
		if _, err := s.Reap(ctx, 0); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("Reap at 010: %v, want ErrSchemaOutdated", err)
		}
		for _, table := range []string{"racefree_idempotency", "racefree_idempotency_steps", "racefree_claims"} {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%s: %d rows at 010 (%v), want none", table, n, err)
			}
		}
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		if res, err := s.Do(ctx, "s", "k", "fp", fn); err != nil || !ran || string(res.Response) != "ok" {
			t.Fatalf("Do for the default tenant at 011: %+v, %v", res, err)
		}
		acme, _ := twoTenants(t)
		if _, err := s.Do(acme, "s", "k", "fp", fn); !errors.Is(err, racefree.ErrSchemaOutdated) {
			t.Fatalf("Do for another tenant at 011: %v, want ErrSchemaOutdated", err)
		}
	})
}

// previous returns the statement name of the release before tenancy, as
// it shipped (testdata/previous).
func previous(t *testing.T, engine, name string) string {
	return testdb.Previous(t, "testdata", engine, name)
}

// TestPreviousReleaseRunsOnTheExpandedSchema proves the rollout: while
// instances of the previous release still run against migration 011,
// their statements (begin, complete, get, save and read a step, reap) work
// unchanged, and their records and recovery points are the default
// tenant's: this release replays their responses, refuses their keys with
// another fingerprint and resumes their steps, and they read what this
// release stores. Migration 012 keeps them all.
func TestPreviousReleaseRunsOnTheExpandedSchema(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		clock := racefree.NewManualClock(t0)
		db := testdb.Open(t, dsn, &racefree.Config{Schema: racefree.SchemaAllowOutdated, Clock: clock})
		if _, err := db.MigrateUpTo(ctx, tenant.TenantsVersion); err != nil {
			t.Fatal(err)
		}
		engine := db.Engine()
		old := func(name string) string { return previous(t, engine, name) }
		retention := time.Hour.Milliseconds()
		now := func() int64 { return clock.Now().UnixMilli() }
		exec := func(name string, args ...any) int64 {
			t.Helper()
			res, err := db.ExecContext(ctx, old(name), args...)
			if err != nil {
				t.Fatalf("previous release, %s: %v", name, err)
			}
			n, _ := res.RowsAffected()
			return n
		}

		// The previous release completes "done", leaves "crashed" in
		// progress with its charge saved, as it did.
		exec("begin", "s", "done", "fp", retention, now())
		if n := exec("complete", "s", "done", []byte("old response"), retention, now()); n != 1 {
			t.Fatalf("previous release: complete changed %d records, want 1", n)
		}
		exec("begin", "s", "crashed", "fp", retention, now())
		exec("step_save", "s", "crashed", "charge", "ch_old", 1, retention, now())
		var tenantOf string
		if err := db.QueryRowContext(ctx, `SELECT DISTINCT tenant FROM racefree_idempotency`).Scan(&tenantOf); err != nil || tenantOf != tenant.Default {
			t.Fatalf("the previous release's records belong to %q (%v), want %q", tenantOf, err, tenant.Default)
		}

		// This release replays, refuses and resumes them for the default
		// tenant.
		s := idempotency.New(db, &idempotency.Options{Retention: time.Hour})
		ran := false
		fn := func(context.Context, *idempotency.Call) ([]byte, error) {
			ran = true
			return []byte("new response"), nil
		}
		if res, err := s.Do(ctx, "s", "done", "fp", fn); err != nil || !res.Replayed || string(res.Response) != "old response" || ran {
			t.Fatalf("this release retries the previous release's key: %+v, %v, fn ran %v; want the replay", res, err, ran)
		}
		if _, err := s.Do(ctx, "s", "done", "other", fn); !errors.Is(err, racefree.ErrMismatch) {
			t.Fatalf("this release, another fingerprint: %v, want ErrMismatch", err)
		}
		res, err := s.Do(ctx, "s", "crashed", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
			v, err := call.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_new", nil })
			if err == nil && call.ResumedSteps != 1 {
				t.Errorf("the previous release's charge was not resumed: %q", v)
			}
			return []byte(v), err
		})
		if err != nil || string(res.Response) != "ch_old" {
			t.Fatalf("this release takes over the crashed request: %+v, %v; want the saved ch_old", res, err)
		}

		// The previous release reads what this release stores.
		if _, err := s.Do(ctx, "s", "new", "fp", func(ctx context.Context, call *idempotency.Call) ([]byte, error) {
			_, err := call.Step(ctx, "ship", func(context.Context) (string, error) { return "sh_1", nil })
			return []byte("stored by this release"), err
		}); err != nil {
			t.Fatal(err)
		}
		var fp, status string
		var response []byte
		if err := db.QueryRowContext(ctx, old("get"), "s", "new", now()).Scan(&fp, &status, &response); err != nil ||
			fp != "fp" || status != "completed" || string(response) != "stored by this release" {
			t.Fatalf("the previous release reads %q %q %q (%v)", fp, status, response, err)
		}
		var step string
		if err := db.QueryRowContext(ctx, old("step_get"), "s", "new", "ship", now()).Scan(&step); err != nil || step != "sh_1" {
			t.Fatalf("the previous release reads the step %q (%v), want sh_1", step, err)
		}
		// A key the previous release begins after this release stored it
		// is not restarted (it is live).
		exec("begin", "s", "new", "other", retention, now())
		if res, err := s.Do(ctx, "s", "new", "fp", fn); err != nil || !res.Replayed || string(res.Response) != "stored by this release" {
			t.Fatalf("after the previous release's begin: %+v, %v; want the replay", res, err)
		}

		// The previous release's reaper deletes expired records and steps,
		// whoever wrote them.
		clock.Advance(time.Hour)
		cut := now()
		if n := exec("reap", 100, cut); n != 3 {
			t.Fatalf("the previous release's reap deleted %d records, want 3", n)
		}
		if n := exec("reap_steps", 100, cut); n != 2 {
			t.Fatalf("the previous release's reap deleted %d steps, want 2", n)
		}

		// After migration 012 this release keeps working on what is left.
		clock.Set(t0)
		exec("begin", "s", "last", "fp", retention, now())
		exec("complete", "s", "last", []byte("last old response"), retention, now())
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		if res, err := s.Do(ctx, "s", "last", "fp", fn); err != nil || !res.Replayed || string(res.Response) != "last old response" {
			t.Fatalf("after 012: %+v, %v; want the replay of the previous release's response", res, err)
		}
	})
}

// TestDoHoldsNoTransactionWhileFnRuns proves that Do's database steps each
// run in a short transaction of their own, none open while fn runs: with a
// pool of one connection, fn can still use the database (here, run Do for
// another key, and the middleware's handler likewise), on both engines.
func TestDoHoldsNoTransactionWhileFnRuns(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{MaxOpenConns: 1}, func(t *testing.T, db *racefree.DB) {
		acme, _ := twoTenants(t)
		s := idempotency.New(db, nil)
		for _, ctx := range []context.Context{context.Background(), acme} {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			res, err := s.Do(ctx, "s", "outer", "fp", func(ctx context.Context, _ *idempotency.Call) ([]byte, error) {
				inner, err := s.Do(ctx, "s", "inner", "fp", func(context.Context, *idempotency.Call) ([]byte, error) {
					return []byte("inner"), nil
				})
				if err != nil {
					return nil, err
				}
				return append([]byte("outer+"), inner.Response...), nil
			})
			cancel()
			if err != nil || string(res.Response) != "outer+inner" {
				t.Fatalf("%s: Do inside fn with one connection: %+v, %v", tenant.From(ctx), res, err)
			}
		}
	})
}

// TestStepRunsForTheCallsTenantWhateverItsContext proves that a Step is
// saved and resumed as its call's tenant, whatever context the caller hands
// Step: one that names no tenant (context.Background(), as a helper deep
// in the handler might build) or one that names another tenant. The first
// run saves two recovery points and fails; the retry resumes both, and
// neither other tenant holds a step.
func TestStepRunsForTheCallsTenantWhateverItsContext(t *testing.T) {
	t.Parallel()
	onOwnerAndApp(t, func(t *testing.T, db *racefree.DB, _ *racefree.ManualClock) {
		acme, globex := twoTenants(t)
		s := idempotency.New(db, nil)
		elsewhere := map[string]context.Context{"no tenant": context.Background(), "globex": globex}
		steps := func(call *idempotency.Call) error {
			for name, ctx := range elsewhere {
				if _, err := call.Step(ctx, name, func(context.Context) (string, error) { return "v-" + name, nil }); err != nil {
					return fmt.Errorf("step with a context of %s: %w", name, err)
				}
			}
			return nil
		}
		failed := errors.New("the handler failed after its steps")
		_, err := s.Do(acme, "s", "k", "fp", func(_ context.Context, call *idempotency.Call) ([]byte, error) {
			if err := steps(call); err != nil {
				return nil, err
			}
			return nil, failed
		})
		if !errors.Is(err, failed) {
			t.Fatalf("first run: %v, want the handler's error", err)
		}
		res, err := s.Do(acme, "s", "k", "fp", func(_ context.Context, call *idempotency.Call) ([]byte, error) {
			if err := steps(call); err != nil {
				return nil, err
			}
			if call.ResumedSteps != len(elsewhere) {
				return nil, fmt.Errorf("resumed %d steps, want %d: a step saved outside acme's tenant", call.ResumedSteps, len(elsewhere))
			}
			return []byte("done"), nil
		})
		if err != nil || string(res.Response) != "done" {
			t.Fatalf("retry: %+v, %v", res, err)
		}
		for _, other := range []string{"default", "globex"} {
			ctx, err := tenant.With(context.Background(), other)
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Do(ctx, "s", "k", "fp", func(_ context.Context, call *idempotency.Call) ([]byte, error) {
				if err := steps(call); err != nil {
					return nil, err
				}
				if call.ResumedSteps != 0 {
					return nil, fmt.Errorf("tenant %s resumed %d of acme's steps", other, call.ResumedSteps)
				}
				return []byte("x"), nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}
