package quota_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/quota"
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

// bind rewrites a query written with $n placeholders for db's engine.
func bind(db *racefree.DB, q string) string {
	if db.Engine() == racefree.SQLite {
		for i := 9; i >= 1; i-- {
			q = strings.ReplaceAll(q, fmt.Sprintf("$%d", i), fmt.Sprintf("?%d", i))
		}
	}
	return q
}

// snapshot returns every row of tenant id in the package's tables, read as
// the owner: on PostgreSQL the tests' owner is a superuser, which
// row-level security does not bind.
func snapshot(t testing.TB, owner *racefree.DB, id string) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT scope, key, kind, tat, used, updated_at, expires_at FROM racefree_quotas WHERE tenant = $1 ORDER BY scope, key, kind`,
		`SELECT scope, ckey, remaining, reset_at, expires_at FROM racefree_quota_ledger WHERE tenant = $1 ORDER BY scope, ckey`,
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
			fmt.Fprintf(&b, "%v\n", vals)
		}
		if err := rs.Close(); err != nil {
			t.Fatal(err)
		}
		b.WriteString("--\n")
	}
	return b.String()
}

// rowsOf counts the rows of tenant id in table ("": every row, at any
// schema).
func rowsOf(t testing.TB, owner *racefree.DB, table, id string) (n int) {
	t.Helper()
	q, args := `SELECT count(*) FROM `+table, []any{}
	if id != "" {
		q, args = bind(owner, q+` WHERE tenant = $1`), []any{id}
	}
	err := owner.QueryRowContext(context.Background(), q, args...).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTenantsAreIsolated has two tenants charge the same keys under the
// same scope, with the same consumption key: each has counters and a
// ledger of its own, and every operation of one (Consume, Refund,
// ConsumeAll, a replay, a denial) leaves the other's rows as they were; a
// reap deletes the expired rows of each and leaves the other's live ones.
// It runs as the owner (on PostgreSQL a superuser, so the SQL's tenant
// filter alone keeps tenants apart) and, on PostgreSQL, as the
// application role, under row-level security.
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	testdb.EachRole(t, t0, func(t *testing.T, db, owner *racefree.DB, clock *racefree.ManualClock) {
		a, b := as(t, "acme"), as(t, "globex")
		l := setup(t, db)
		charge := func(ctx context.Context, key string, n int64, p quota.Policy) quota.Decision {
			t.Helper()
			d, err := l.Consume(ctx, db, key, n, p)
			if err != nil {
				t.Fatalf("consume %s %d: %v", key, n, err)
			}
			return d
		}
		all := func(ctx context.Context, reqs ...quota.Request) quota.Decision {
			t.Helper()
			d, err := l.ConsumeAll(ctx, db, reqs)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		once := quota.Request{Key: "c", N: 5, Policy: gcra, ConsumptionKey: "order-1"}
		// globex: 3 of k's 5 units, 2 of w's window, order-1 charged.
		if d := charge(b, "k", 3, gcra); !d.Allowed || d.Remaining != 2 {
			t.Fatalf("globex k: %+v", d)
		}
		charge(b, "w", 2, window)
		if d := all(b, once); !d.Allowed || d.Replayed || d.Remaining != 0 {
			t.Fatalf("globex order-1: %+v", d)
		}
		before := snapshot(t, owner, "globex")
		unchanged := func(op string) {
			t.Helper()
			if after := snapshot(t, owner, "globex"); after != before {
				t.Fatalf("%s for acme changed globex's rows:\n%s\nwas\n%s", op, after, before)
			}
		}

		// acme has its own full counters, and the same consumption key is
		// a first charge for it.
		if d := charge(a, "k", 5, gcra); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("acme k, 5 units: %+v; want allowed, 0 remaining (globex's 3 are globex's)", d)
		}
		unchanged("consume")
		if d := charge(a, "k", 1, gcra); d.Allowed || d.RetryAfter != 100*time.Millisecond {
			t.Fatalf("acme k over its burst: %+v; want denied for 100ms", d)
		}
		unchanged("a denied consume")
		if d := charge(a, "w", 5, window); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("acme w: %+v", d)
		}
		if d := charge(a, "w", 1, window); d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("acme w over its limit: %+v", d)
		}
		unchanged("window charges")
		if d, err := l.Refund(a, db, "k", 2, gcra); err != nil || d.Remaining != 2 {
			t.Fatalf("acme refund k: %+v %v; want 2 remaining", d, err)
		}
		if d, err := l.Refund(a, db, "w", 1, window); err != nil || d.Remaining != 1 {
			t.Fatalf("acme refund w: %+v %v; want 1 remaining", d, err)
		}
		unchanged("refunds")
		if d := all(a, once); !d.Allowed || d.Replayed {
			t.Fatalf("acme order-1: %+v; want a first charge", d)
		}
		if d := all(a, once); !d.Allowed || !d.Replayed || d.Remaining != 0 {
			t.Fatalf("acme order-1 again: %+v; want its own replay", d)
		}
		unchanged("consumption keys")
		if d := all(a, quota.Request{Key: "k", N: 5, Policy: gcra, ConsumptionKey: "order-2"}); d.Allowed {
			t.Fatalf("acme denied ConsumeAll: %+v", d)
		}
		unchanged("a denied ConsumeAll")
		charge(a, "short", 1, gcra) // expires at +100ms

		// globex's counters are where it left them; its replay has its
		// figures.
		if d := charge(b, "k", 2, gcra); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("globex k after acme's charges: %+v; want its last 2 units", d)
		}
		if d := charge(b, "w", 3, window); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("globex w after acme's charges: %+v; want its last 3 units", d)
		}
		if d := all(b, once); !d.Allowed || !d.Replayed || d.Remaining != 0 || !d.ResetAt.Equal(t0.Add(500*time.Millisecond)) {
			t.Fatalf("globex order-1 replay: %+v; want globex's figures", d)
		}
		before = snapshot(t, owner, "globex")

		// At +200ms acme's "short" has expired; everything of globex's is
		// live: a reap takes acme's and leaves globex's.
		clock.Set(t0.Add(200 * time.Millisecond))
		if n, err := l.Reap(context.Background(), db); err != nil || n != 1 {
			t.Fatalf("reap at +200ms: %d, %v; want 1 (acme's short)", n, err)
		}
		unchanged("the reap")
		// Later every tenant's expired counters go; the ledgers stay a day.
		clock.Set(t0.Add(2 * time.Second))
		if _, err := l.Reap(context.Background(), db); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"acme", "globex"} {
			if n := rowsOf(t, owner, "racefree_quotas", id); n != 0 {
				t.Fatalf("%d counters of %s left after they expired, want 0", n, id)
			}
			if n := rowsOf(t, owner, "racefree_quota_ledger", id); n != 1 {
				t.Fatalf("%d consumption keys of %s, want 1", n, id)
			}
		}
	})
}

// TestConcurrentTenantsEachAdmitTheirLimit: 100 concurrent charges of one
// key by each of two tenants admit exactly 50 each.
func TestConcurrentTenantsEachAdmitTheirLimit(t *testing.T) {
	t.Parallel()
	testdb.EachRole(t, t0, func(t *testing.T, db, owner *racefree.DB, clock *racefree.ManualClock) {
		l := setup(t, db)
		p := quota.Policy{Kind: quota.GCRA, Rate: 1, Per: time.Hour, Burst: 50, Wait: 2 * time.Minute}
		ids := []string{"acme", "globex"}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			allowed = map[string]int{}
		)
		for i := range 200 {
			id := ids[i%2]
			ctx := as(t, id)
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.Consume(ctx, db, "hot", 1, p)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					allowed[id]++
				}
			}()
		}
		wg.Wait()
		for _, id := range ids {
			if got := allowed[id]; got != 50 {
				t.Errorf("%s: %d of 100 allowed, want 50", id, got)
			}
		}
	})
}

// TestMiddlewareChargesTheRequestsTenant: the middleware charges the
// tenant of the request's context (set by an authentication middleware in
// front of it), so two tenants' clients at one address have a limit each.
func TestMiddlewareChargesTheRequestsTenant(t *testing.T) {
	t.Parallel()
	testdb.EachRole(t, t0, func(t *testing.T, db, owner *racefree.DB, clock *racefree.ManualClock) {
		l := setup(t, db)
		mw, err := l.Middleware(db, quota.Policy{Kind: quota.GCRA, Rate: 1, Per: time.Second, Burst: 2, Wait: time.Minute}, quota.KeyByIP)
		if err != nil {
			t.Fatal(err)
		}
		inner := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, err := tenant.With(r.Context(), r.Header.Get("X-Tenant"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, r.WithContext(ctx))
		})
		get := func(id string) int {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "192.0.2.1:1000"
			r.Header.Set("X-Tenant", id)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Code
		}
		for i, want := range []struct {
			id   string
			code int
		}{{"acme", 200}, {"acme", 200}, {"acme", 429}, {"globex", 200}, {"globex", 200}, {"globex", 429}, {"acme", 429}} {
			if got := get(want.id); got != want.code {
				t.Fatalf("request %d (%s): %d, want %d", i+1, want.id, got, want.code)
			}
		}
		if got := snapshot(t, owner, "acme"); got != snapshot(t, owner, "globex") {
			t.Fatalf("the two tenants' counters differ:\n%s\n%s", got, snapshot(t, owner, "globex"))
		}
	})
}

// TestNeedsTheTenantsMigration: before migration 011 every operation is
// ErrSchemaOutdated and writes nothing; at 011 the same Limiter works for
// the default tenant, while another tenant needs 012 (the middleware
// answers 503 schema until then).
func TestNeedsTheTenantsMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, 10); err != nil {
			t.Fatal(err)
		}
		l := setup(t, db)
		ops := func(ctx context.Context) []error {
			_, err1 := l.Consume(ctx, db, "k", 1, gcra)
			_, err2 := l.Refund(ctx, db, "k", 1, gcra)
			_, err3 := l.ConsumeAll(ctx, db, []quota.Request{{Key: "k", N: 1, Policy: gcra, ConsumptionKey: "c"}})
			return []error{err1, err2, err3}
		}
		_, err := l.Reap(ctx, db)
		for i, err := range append(ops(ctx), err) {
			if !errors.Is(err, racefree.ErrSchemaOutdated) {
				t.Errorf("operation %d at schema 10: %v, want ErrSchemaOutdated", i+1, err)
			}
		}
		if n := rowsOf(t, db, "racefree_quotas", "") + rowsOf(t, db, "racefree_quota_ledger", ""); n != 0 {
			t.Fatalf("%d rows written at schema 10, want none", n)
		}
		if _, err := db.MigrateUpTo(ctx, 11); err != nil {
			t.Fatal(err)
		}
		for i, err := range ops(ctx) {
			if err != nil {
				t.Errorf("operation %d of the default tenant at schema 11: %v", i+1, err)
			}
		}
		if _, err := l.Reap(ctx, db); err != nil {
			t.Errorf("reap at schema 11: %v", err)
		}
		acme := as(t, "acme")
		for i, err := range ops(acme) {
			if !errors.Is(err, racefree.ErrSchemaOutdated) {
				t.Errorf("operation %d of another tenant at schema 11: %v, want ErrSchemaOutdated", i+1, err)
			}
		}
		mw, err := l.Middleware(db, gcra, func(*http.Request) (string, error) { return "k", nil })
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		mw(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(acme))
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "schema") {
			t.Errorf("middleware for another tenant at schema 11: %d %s; want 503 schema", w.Code, w.Body)
		}
		if n := rowsOf(t, db, "racefree_quotas", "acme") + rowsOf(t, db, "racefree_quota_ledger", "acme"); n != 0 {
			t.Fatalf("%d rows of another tenant written at schema 11, want none", n)
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		for i, err := range ops(acme) {
			if err != nil {
				t.Errorf("operation %d of another tenant at schema 12: %v", i+1, err)
			}
		}
	})
}

// TestPreviousReleaseRunsOnTheExpandedSchema runs the previous release's
// statements (testdata/previous, as at the branch base: no tenant, ON
// CONFLICT on the keys without it) against migration 011, beside this
// release's code on the same keys: they share the default tenant's
// counters, ledger and reaper.
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
		l := setup(t, db)
		clk := wire.Of(db).ClockArg()
		ms := racefree.Millis(t0)
		// prevConsume runs the previous consume statement: (scope, key, n,
		// T or window, limit, clock); allowed when it returns an allowed
		// row (PostgreSQL answers a refusal with allowed false, SQLite
		// with no row).
		prevConsume := func(name, key string, n, arg, limit int64) bool {
			t.Helper()
			var (
				allowed        bool
				tat, used, now int64
			)
			err := db.QueryRowContext(ctx, prev.Get(name), "", key, n, arg, limit, clk).Scan(&allowed, &tat, &used, &now)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("previous %s: %v", name, err)
			}
			return err == nil && allowed
		}

		// GCRA: the previous release and this one charge one counter.
		if !prevConsume("consume_gcra", "k", 2, 100, 5) {
			t.Fatal("previous consume_gcra refused a full bucket")
		}
		if n := rowsOf(t, db, "racefree_quotas", tenant.Default); n != 1 {
			t.Fatalf("%d counters of the default tenant, want 1", n)
		}
		if d := consume(t, l, db, "k", 1, gcra); !d.Allowed || d.Remaining != 2 {
			t.Fatalf("this release after the previous one's 2 units: %+v; want 2 remaining", d)
		}
		if !prevConsume("consume_gcra", "k", 2, 100, 5) || prevConsume("consume_gcra", "k", 1, 100, 5) {
			t.Fatal("previous consume_gcra: want the last 2 units allowed, then a refusal")
		}
		if d := consume(t, l, db, "k", 1, gcra); d.Allowed || d.RetryAfter != 100*time.Millisecond {
			t.Fatalf("this release on the full counter: %+v; want denied for 100ms", d)
		}
		var now, tat, used sql.NullInt64
		if err := db.QueryRowContext(ctx, prev.Get("state"), "", "k", "gcra", clk).Scan(&now, &tat, &used); err != nil || tat.Int64 != ms+500 {
			t.Fatalf("previous state: tat %v, %v; want +500ms", tat, err)
		}
		if err := db.QueryRowContext(ctx, prev.Get("refund_gcra"), "", "k", 1, 100, clk).Scan(&tat, &used, &now); err != nil || tat.Int64 != ms+400 {
			t.Fatalf("previous refund_gcra: tat %v, %v; want +400ms", tat, err)
		}
		if d := consume(t, l, db, "k", 1, gcra); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("this release after the previous refund: %+v", d)
		}
		// Fixed window.
		if !prevConsume("consume_window", "w", 3, 1000, 5) {
			t.Fatal("previous consume_window refused")
		}
		if d := consume(t, l, db, "w", 3, window); d.Allowed {
			t.Fatalf("this release, 3 more of 5: %+v; want denied", d)
		}
		if d := consume(t, l, db, "w", 2, window); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("this release, the last 2 of 5: %+v", d)
		}
		// Consumption keys: a key the previous release charged is a
		// replay here, with its figures, and the other way round.
		var first int
		if err := db.QueryRowContext(ctx, prev.Get("ledger_insert"), "", "order-1", 3_600_000, clk).Scan(&first); err != nil {
			t.Fatalf("previous ledger_insert: %v", err)
		}
		if _, err := db.ExecContext(ctx, prev.Get("ledger_set"), "", "order-1", 7, ms+900); err != nil {
			t.Fatalf("previous ledger_set: %v", err)
		}
		if d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "x", N: 1, Policy: gcra, ConsumptionKey: "order-1"}}); err != nil ||
			!d.Replayed || d.Remaining != 7 || !d.ResetAt.Equal(t0.Add(900*time.Millisecond)) {
			t.Fatalf("this release replaying the previous one's charge: %+v %v", d, err)
		}
		if d, err := l.ConsumeAll(ctx, db, []quota.Request{{Key: "x", N: 1, Policy: gcra, ConsumptionKey: "order-2"}}); err != nil || !d.Allowed || d.Replayed {
			t.Fatalf("this release's first charge of order-2: %+v %v", d, err)
		}
		if err := db.QueryRowContext(ctx, prev.Get("ledger_insert"), "", "order-2", 3_600_000, clk).Scan(&first); !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("previous ledger_insert of a key this release charged: %v; want no row (a replay)", err)
		}
		var remaining, resetAt int64
		if err := db.QueryRowContext(ctx, prev.Get("ledger_get"), "", "order-2").Scan(&remaining, &resetAt); err != nil || remaining != 4 {
			t.Fatalf("previous ledger_get: %d %v; want 4", remaining, err)
		}
		// The previous reaper deletes this release's expired rows too (the
		// ledger's after a day).
		clock.Set(t0.Add(25 * time.Hour))
		for _, name := range []string{"reap", "reap_ledger"} {
			if _, err := db.ExecContext(ctx, prev.Get(name), "", racefree.Millis(clock.Now()), 1000); err != nil {
				t.Fatalf("previous %s: %v", name, err)
			}
		}
		if n := rowsOf(t, db, "racefree_quotas", "") + rowsOf(t, db, "racefree_quota_ledger", ""); n != 0 {
			t.Fatalf("%d rows left after the previous release's reap, want 0", n)
		}
	})
}
