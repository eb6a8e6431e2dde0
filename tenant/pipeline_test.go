package tenant_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

// counted opens dsnStr on a pool of conns connections that counts its
// round trips (testdb.Counted).
func counted(t *testing.T, dsnStr string, conns int) (*racefree.DB, *atomic.Int64) {
	t.Helper()
	return testdb.Counted(t, dsnStr, conns, nil)
}

// withMode returns dsnStr with pgx's default_query_exec_mode set to mode
// ("" leaves pgx's default, cache_statement).
func withMode(t *testing.T, dsnStr, mode string) string {
	t.Helper()
	if mode == "" {
		return dsnStr
	}
	u, err := url.Parse(dsnStr)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", mode)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestAStatementOnThePoolIsOneRoundTripForItsTenant: as the application
// role, on the pool, QueryRow and Exec send the tenant and the statement
// in one round trip (once the statement is prepared), the statement sees
// the tenant and nobody else's rows, and the connection goes back to the
// pool carrying no tenant, after a success and after a failure. It holds
// in each of pgx's query modes a pooler may need.
func TestAStatementOnThePoolIsOneRoundTripForItsTenant(t *testing.T) {
	for _, mode := range []string{"", "exec", "simple_protocol"} {
		name := mode
		if name == "" {
			name = "cache_statement"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := testdb.NewDSN(t, racefree.Postgres)
			owner := testdb.Open(t, dsn, nil)
			// One connection: every call below reuses the same session.
			app, writes := counted(t, withMode(t, testdb.AppDSN(t, owner, dsn), mode), 1)
			acme, _ := tenant.With(ctx, "acme")
			globex, _ := tenant.With(ctx, "globex")
			const (
				current = `SELECT current_setting('racefree.tenant_id', true)`
				insert  = `INSERT INTO racefree_sequences (tenant, scope, name, last) VALUES ($1, 's', 'n', 1)`
				count   = `SELECT count(*) FROM racefree_sequences`
			)
			for i := range 3 { // the first registers the tenant, the second prepares
				before := writes.Load()
				var got string
				if err := send.QueryRow(acme, app, app, current, nil, &got); err != nil {
					t.Fatal(err)
				}
				if got != "acme" {
					t.Fatalf("call %d: the statement saw tenant %q, want acme", i, got)
				}
				if n := writes.Load() - before; i == 2 && n != 1 {
					t.Fatalf("a warm call took %d round trips, want 1", n)
				}
				if got := setting(t, ctx, app); got != "" {
					t.Fatalf("call %d: the pooled connection carries tenant %q afterwards, want none", i, got)
				}
			}
			if err := tenant.InTx(ctx, app, "globex", func(context.Context, *sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			n, err := send.Exec(acme, app, app.SQL(), insert, "acme")
			if err != nil || n != 1 {
				t.Fatalf("acme writes its row: %d, %v", n, err)
			}
			for _, c := range []struct {
				ctx  context.Context
				want int
			}{{acme, 1}, {globex, 0}} {
				var got int
				if err := send.QueryRow(c.ctx, app, app, count, nil, &got); err != nil || got != c.want {
					t.Fatalf("%s counts %d rows (%v), want %d", tenant.From(c.ctx), got, err, c.want)
				}
			}
			if _, err := send.Exec(globex, app, app, insert, "acme"); err == nil {
				t.Fatal("globex wrote a row of acme")
			}
			if _, err := send.Exec(acme, app, app, `SELECT 1/0`); err == nil {
				t.Fatal("a division by zero succeeded")
			}
			if got := setting(t, ctx, app); got != "" {
				t.Fatalf("after a failed statement the pooled connection carries tenant %q, want none", got)
			}
			var none int
			if err := send.QueryRow(acme, app, app, `SELECT 1 WHERE false`, nil, &none); !errors.Is(err, racefree.ErrNotFound) {
				t.Fatalf("no row: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestAPipelineIsOneTransaction is what the path above relies on, checked
// on the server: statements sent in one pipeline see a setting made by
// set_config(…, true) before them, the next use of the connection does
// not, and a failure anywhere rolls every statement back.
func TestAPipelineIsOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, dsn, nil)
	db, writes := counted(t, testdb.AppDSN(t, owner, dsn), 1)
	if _, err := owner.ExecContext(ctx, `CREATE TABLE pipelined (n int); GRANT ALL ON pipelined TO PUBLIC`); err != nil {
		t.Fatal(err)
	}
	set := &wire.Statement{Query: `SELECT set_config('racefree.tenant_id', $1, true)`, Args: []any{"acme"}}
	var seen string
	read := &wire.Statement{Query: `SELECT current_setting('racefree.tenant_id', true)`, Dest: []any{&seen}}
	ins := &wire.Statement{Query: `INSERT INTO pipelined VALUES (1)`}
	before := writes.Load()
	if err := wire.Of(db).Pipeline(ctx, set, ins, read); err != nil {
		t.Fatal(err)
	}
	if seen != "acme" || ins.RowsAffected != 1 {
		t.Fatalf("in the pipeline: setting %q, %d rows inserted; want acme, 1", seen, ins.RowsAffected)
	}
	if n := writes.Load() - before; n > 2 {
		t.Fatalf("a cold pipeline took %d round trips, want at most 2 (prepare, run)", n)
	}
	if got := setting(t, ctx, db); got != "" {
		t.Fatalf("after the pipeline the connection carries %q, want none", got)
	}
	err := wire.Of(db).Pipeline(ctx, set, ins, &wire.Statement{Query: `SELECT 1/0`})
	if err == nil {
		t.Fatal("a pipeline with a division by zero succeeded")
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pipelined`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the failed pipeline %d rows (%v), want 1: its insert rolled back", n, err)
	}
	if got := setting(t, ctx, db); got != "" {
		t.Fatalf("after the failed pipeline the connection carries %q, want none", got)
	}
}

// TestAPipelinedStatementReadsEveryRow: a statement with Rows reads every
// row it returns, after a setting made earlier in the pipeline, and reports
// the rows it affected; a statement whose rows fail on the server part way
// returns the error, and every statement of the pipeline rolls back.
func TestAPipelinedStatementReadsEveryRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, dsn, nil)
	db, writes := counted(t, testdb.AppDSN(t, owner, dsn), 1)
	if _, err := owner.ExecContext(ctx, `CREATE TABLE pipelined (n int); GRANT ALL ON pipelined TO PUBLIC`); err != nil {
		t.Fatal(err)
	}
	set := &wire.Statement{Query: `SELECT set_config('racefree.tenant_id', $1, true)`, Args: []any{"acme"}}
	var got []string
	each := func(rows wire.Rows) error {
		got = got[:0]
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return err
			}
			got = append(got, s)
		}
		return nil
	}
	ins := &wire.Statement{Query: `INSERT INTO pipelined SELECT g FROM generate_series(1, 3) AS g RETURNING current_setting('racefree.tenant_id', true) || n`, Rows: each}
	for range 2 { // the first prepares
		before := writes.Load()
		if err := wire.Of(db).Pipeline(ctx, set, ins); err != nil {
			t.Fatal(err)
		}
		if n := writes.Load() - before; n > 2 {
			t.Fatalf("a pipeline took %d round trips, want at most 2 (prepare, run)", n)
		}
		if fmt.Sprint(got) != "[acme1 acme2 acme3]" || ins.RowsAffected != 3 {
			t.Fatalf("read %v, %d rows affected; want [acme1 acme2 acme3], 3", got, ins.RowsAffected)
		}
	}
	failing := &wire.Statement{Query: `SELECT (10 / (3 - g))::text FROM generate_series(1, 5) AS g`, Rows: each}
	if err := wire.Of(db).Pipeline(ctx, set, ins, failing); err == nil {
		t.Fatalf("rows failing with a division by zero read as a success: %v", got)
	}
	var n int
	if err := owner.QueryRowContext(ctx, `SELECT count(*) FROM pipelined`).Scan(&n); err != nil || n != 6 {
		t.Fatalf("after the failed pipeline %d rows (%v), want 6: its insert rolled back", n, err)
	}
	// A reader that refuses a row: its error is the pipeline's.
	refused := errors.New("refused")
	unreadable := &wire.Statement{Query: `SELECT 'x'`, Rows: func(rows wire.Rows) error {
		if rows.Next() {
			return refused
		}
		return nil
	}}
	if err := wire.Of(db).Pipeline(ctx, set, unreadable); !errors.Is(err, refused) {
		t.Fatalf("a reader that refused a row: %v, want its error", err)
	}
}

// TestWithoutTheSettingAPipelinedStatementSeesNothing: the statement alone,
// or after the setting of another tenant, sees none of acme's rows and
// cannot write one: row-level security, not the statement, decides.
func TestWithoutTheSettingAPipelinedStatementSeesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, app := postgres(t)
	acme, _ := tenant.With(ctx, "acme")
	insert := `INSERT INTO racefree_sequences (tenant, scope, name, last) VALUES ('acme', 's', 'n', 1)`
	if _, err := send.Exec(acme, app, app, insert); err != nil {
		t.Fatal(err)
	}
	for _, set := range [][]*wire.Statement{
		nil,
		{{Query: `SELECT set_config('racefree.tenant_id', 'globex', true)`}},
		{{Query: `SELECT set_config('racefree.tenant_id', '', true)`}},
	} {
		var n int
		count := &wire.Statement{Query: `SELECT count(*) FROM racefree_sequences`, Dest: []any{&n}}
		if err := wire.Of(app).Pipeline(ctx, append(set, count)...); err != nil || n != 0 {
			t.Fatalf("after %d setting statements: %d rows seen (%v), want 0", len(set), n, err)
		}
		if err := wire.Of(app).Pipeline(ctx, append(set, &wire.Statement{Query: insert})...); err == nil {
			t.Fatalf("after %d setting statements acme's row was written", len(set))
		}
	}
}

// TestACallersTransactionIsNeverPipelined: QueryRow and Exec given the
// caller's transaction run in it, on its connection: the statement sees
// the transaction's own writes and rolls back with it.
func TestACallersTransactionIsNeverPipelined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, dsn, nil)
	app, _ := counted(t, testdb.AppDSN(t, owner, dsn), 2)
	insert := `INSERT INTO racefree_sequences (tenant, scope, name, last) VALUES ('acme', 's', $1, 1)`
	count := `SELECT count(*) FROM racefree_sequences`
	acme, _ := tenant.With(ctx, "acme")
	if _, err := send.Exec(acme, app, app, `SELECT 1`); err != nil { // acme is known: its calls may be pipelined
		t.Fatal(err)
	}
	err := tenant.InTx(ctx, app, "acme", func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, insert, "mine"); err != nil {
			return err
		}
		var n int
		if err := send.QueryRow(ctx, app, tx, count, nil, &n); err != nil || n != 1 {
			t.Errorf("in the caller's transaction %d rows seen (%v), want its own 1", n, err)
		}
		if _, err := send.Exec(ctx, app, tx, insert, "theirs"); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if err == nil || err.Error() != "roll back" {
		t.Fatal(err)
	}
	// A transaction of the caller's own, which Run sets.
	tx, err := app.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := send.Exec(acme, app, tx, insert, "theirs"); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()
	var n int
	if err := send.QueryRow(acme, app, app, count, nil, &n); err != nil || n != 0 {
		t.Fatalf("after the callers' transactions rolled back %d rows remain (%v), want 0", n, err)
	}
}

// TestAPipelinedCallRegistersItsTenant: a tenant whose first call in the
// process goes to the pool is in the registry afterwards, so maintenance
// (tenant.Each: the reapers) visits it.
func TestAPipelinedCallRegistersItsTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, app := postgres(t)
	newco, _ := tenant.With(ctx, "newco")
	if _, err := send.Exec(newco, app, app, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	var seen []string
	err := tenant.Each(ctx, app, func(ctx context.Context) error {
		seen = append(seen, tenant.From(ctx))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range seen {
		if id == "newco" {
			return
		}
	}
	t.Fatalf("Each visited %v, want newco among them", seen)
}

// TestAPipelineRetriesATransientConflict: a serialization failure of the
// pipelined statement runs it again, as InTx does, and a cancelled
// context runs nothing.
func TestAPipelineRetriesATransientConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner, app := postgres(t)
	_, err := owner.ExecContext(ctx, `
CREATE SEQUENCE attempts;
CREATE FUNCTION flaky() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint := nextval('attempts'); -- not transactional: survives the rollback
BEGIN
  IF n < 3 THEN RAISE EXCEPTION 'conflict %', n USING ERRCODE = '40001'; END IF;
  RETURN n;
END $$;
GRANT USAGE ON SEQUENCE attempts TO PUBLIC`)
	if err != nil {
		t.Fatal(err)
	}
	acme, _ := tenant.With(ctx, "acme")
	var n int64
	if err := send.QueryRow(acme, app, app, `SELECT 1`, nil, &n); err != nil { // registers acme
		t.Fatal(err)
	}
	if err := send.QueryRow(acme, app, app, `SELECT flaky()`, nil, &n); err != nil || n != 3 {
		t.Fatalf("flaky: %d, %v; want 3 after two retried conflicts", n, err)
	}
	cancelled, cancel := context.WithCancel(acme)
	cancel()
	if _, err := send.Exec(cancelled, app, app, `SELECT flaky()`); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled call: %v, want context.Canceled", err)
	}
	if err := owner.QueryRowContext(ctx, `SELECT last_value FROM attempts`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("the sequence is at %d (%v): the cancelled call ran", n, err)
	}
}
