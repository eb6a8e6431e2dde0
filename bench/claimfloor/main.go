// Command claimfloor measures what each part of SQLite's claims table
// (or, with -engine postgres, of PostgreSQL's claims: below) costs one
// Acquire then Release at one client: racefree's own
// statements (claim/sql/sqlite/acquire.sql and release.sql, read from
// the repository) on the table as racefree migrates it, then on that
// table without one part at a time, beside the library's calls and the
// two bare statements of the claims bench on a minimal table. Each row
// is a fresh SQLite file, one client, distinct keys; it prints pairs per
// second and the CPU time a pair cost the process (SQLite runs inside
// it), and each row's CPU against the bare statements'. The rows run
// alternately, slice by slice, so that a shared machine's load falls on
// all of them alike.
//
//	go run ./claimfloor                   # 3 s a row
//	go run ./claimfloor -short            # 200 ms a row: checks that it runs
//	go run ./claimfloor -batch 16         # 16 acquires in one transaction, then their 16 releases
//	go run ./claimfloor -engine postgres  # the same on PostgreSQL (TEST_DATABASE_URL)
//
// -engine postgres runs PostgreSQL's rows (postgres.go): the library,
// then racefree's statements (claim/sql/postgres) as the library sends
// them on the pool for a role that row-level security does not bind
// (acquire.sql and raise_new.sql in one round trip, then release.sql),
// then without raise_new, the timeline's floor, the lock taken before
// the clock, or the reaper's expiry index, one at a time, then without
// all four, then the bare statements; each row in a fresh schema,
// analyzed after its warm-up, and the CPU printed is this process's and
// the server's.
//
// -batch N (N > 1) runs the statements as the combiner's batches run them
// on SQLite at their best: N acquires of N keys in one transaction, then
// their N releases in another, each statement on its own, and prints
// figures per pair. SQLite has one writer, so a batch's statements and
// its commit run on one core at a time whatever the number of clients:
// one second divided by a pair's CPU at -batch 16 is about the most
// pairs per second any number of clients could get on that table, and
// the library's row, which has no batch of its own, is left out.
//
// The rows without a part are not racefree: the reaper's expiry index
// is what keeps a reap in proportion to what it deletes (docs/performance.md,
// "What a claim reap costs"), the rowid is what the previous release's
// reaper deletes by, and the engine's clock is DESIGN.md's referee. They
// show where the distance to the bare statements is.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/bench/internal/bare"
	"github.com/racefree/racefree/bench/internal/run"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/tenant"
)

var (
	short    = flag.Bool("short", false, "run each row for 200 ms")
	cellTime = flag.Duration("time", 3*time.Second, "how long each row runs")
	engine   = flag.String("engine", racefree.SQLite, "sqlite, or postgres (the server TEST_DATABASE_URL names)")
	sqlDir   = flag.String("sql", "", "the directory of racefree's claim statements (empty: ../claim/sql/ENGINE)")
	batch    = flag.Int("batch", 1, "pairs per transaction: N acquires in one, then their N releases in another (1: each statement commits alone)")
)

const ttl = time.Minute

func main() { run.Main(short, cellTime, bench) }

// A row is a schema change after migration and how the pair runs.
type row struct {
	name string
	ddl  []string // run after migration
	pair func(ctx context.Context, db *racefree.DB) (run.Op, error)
}

const (
	dropExpiry  = `DROP INDEX racefree_claims_expiry`
	withoutRows = `CREATE TABLE racefree_claims_new (tenant TEXT NOT NULL, ns TEXT NOT NULL, key TEXT NOT NULL,
  holder TEXT NOT NULL, count BIGINT NOT NULL, first_seen BIGINT NOT NULL, last_seen BIGINT NOT NULL,
  fence BIGINT, claimed_at BIGINT, expires_at BIGINT, PRIMARY KEY (tenant, ns, key)) WITHOUT ROWID`
)

// rowidless rebuilds the table WITHOUT ROWID (its rows in the primary
// key's b-tree, not in a rowid b-tree beside the key's index); expiry
// is the reaper's index it then creates again.
var (
	rowidless = []string{withoutRows, `DROP TABLE racefree_claims`, `ALTER TABLE racefree_claims_new RENAME TO racefree_claims`}
	expiry    = `CREATE INDEX racefree_claims_expiry ON racefree_claims (tenant, ns, expires_at)`
)

func bench() error {
	ctx := context.Background()
	if *sqlDir == "" {
		*sqlDir = filepath.Join("..", "claim", "sql", *engine)
	}
	var (
		rows []row
		err  error
	)
	open := openSQLite
	switch {
	case *engine == racefree.Postgres && *batch > 1:
		return fmt.Errorf("-batch is for SQLite's one writer: on PostgreSQL run the claims bench")
	case *engine == racefree.Postgres:
		base := os.Getenv("TEST_DATABASE_URL")
		if base == "" {
			return fmt.Errorf("-engine postgres: TEST_DATABASE_URL is not set")
		}
		if rows, err = pgRows(*sqlDir); err != nil {
			return err
		}
		open = func(ctx context.Context, r row) (run.Op, func(), error) { return openPostgres(ctx, base, r) }
	case *engine == racefree.SQLite:
		if rows, err = sqliteRows(*sqlDir); err != nil {
			return err
		}
	default:
		return fmt.Errorf("-engine: %q is not sqlite or postgres", *engine)
	}
	ops := make([]run.Op, len(rows))
	for i, r := range rows {
		op, done, err := open(ctx, r)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		defer done()
		ops[i] = op
	}
	results := run.Alternately(ctx, 1, *cellTime, ops...)
	n := max(*batch, 1)
	for i := range results { // a call ran n pairs
		results[i].Rate *= float64(n)
		results[i].CPU /= time.Duration(n)
		results[i].ServerCPU /= time.Duration(n)
	}
	floor := results[len(results)-1]
	fmt.Printf("Claim Acquire then Release on %s at one client, distinct keys, %d pairs a transaction, %v a row.\n\n", *engine, n, *cellTime)
	if *engine == racefree.Postgres {
		fmt.Println("| what runs | pairs/s | CPU per pair (this process + the server) | bare / this (CPU) |")
	} else {
		fmt.Println("| what runs | pairs/s | CPU per pair | bare / this (CPU) |")
	}
	fmt.Println("|---|---|---|---|")
	for i, r := range rows {
		cpu := results[i].CPU.Round(100 * time.Nanosecond).String()
		if *engine == racefree.Postgres {
			cpu = fmt.Sprintf("%v+%v", results[i].CPU.Round(100*time.Nanosecond), results[i].ServerCPU.Round(100*time.Nanosecond))
		}
		fmt.Printf("| %s | %.0f | %s | %.2f× |\n", r.name, results[i].Rate, cpu,
			float64(floor.CPU+floor.ServerCPU)/float64(results[i].CPU+results[i].ServerCPU))
	}
	return nil
}

// sqliteRows are SQLite's rows: the library (unless -batch), racefree's
// statements read from dir on its table, then without one part at a
// time, then the bare statements.
func sqliteRows(dir string) ([]row, error) {
	acquire, err := os.ReadFile(filepath.Join(dir, "acquire.sql"))
	if err != nil {
		return nil, err
	}
	release, err := os.ReadFile(filepath.Join(dir, "release.sql"))
	if err != nil {
		return nil, err
	}
	statements := func(goClock bool) func(ctx context.Context, db *racefree.DB) (run.Op, error) {
		return func(ctx context.Context, db *racefree.DB) (run.Op, error) {
			clock := func() any {
				if goClock {
					return time.Now().UnixMilli()
				}
				return nil
			}
			return pairs(ctx, db, pair{
				acquire: string(acquire),
				release: string(release),
				acquireArgs: func(key string) []any {
					return []any{tenant.Default, "bench", key, "w", ttl.Milliseconds(), clock()}
				},
				fence: func(row *sql.Row) (int64, error) {
					var holder string
					var n [7]int64
					var inserted bool
					err := row.Scan(&holder, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6], &inserted)
					return n[0], err
				},
				releaseArgs: func(key string, fence int64) []any {
					return []any{tenant.Default, "bench", key, "w", fence, clock()}
				},
			})
		}
	}
	var rows []row
	if *batch <= 1 {
		rows = append(rows, row{name: "claim.Acquire + Release (the library, combiner off)", pair: library})
	}
	return append(rows, []row{
		{name: "racefree's two statements on its table", pair: statements(false)},
		{name: "… the clock bound from the process", pair: statements(true)},
		{name: "… WITHOUT ROWID", ddl: append(rowidless[:3:3], expiry), pair: statements(false)},
		{name: "… without the reaper's expiry index", ddl: []string{dropExpiry}, pair: statements(false)},
		{name: "… without all three", ddl: rowidless, pair: statements(true)},
		{name: "two bare statements on a minimal table", pair: bares},
	}...), nil
}

// library is one client's claim.Acquire then Release of a fresh key.
func library(ctx context.Context, db *racefree.DB) (run.Op, error) {
	claims := claim.New(db)
	return func(ctx context.Context, c, i int) error {
		key := fmt.Sprintf("k-%d-%d", c, i)
		cl, err := claims.Acquire(ctx, db, key, "w", ttl)
		if err != nil {
			return err
		}
		return claims.Release(ctx, db, key, "w", cl.Fence)
	}, nil
}

// bares is the two bare statements of the claims bench on a minimal
// table, created on db.
func bares(ctx context.Context, db *racefree.DB) (run.Op, error) {
	table, acquire, release := bare.Statements(db.Engine())
	if _, err := db.ExecContext(ctx, table); err != nil {
		return nil, err
	}
	return pairs(ctx, db, pair{
		acquire:     acquire,
		release:     release,
		acquireArgs: func(key string) []any { return []any{key, "w", time.Now().UnixMilli(), ttl.Milliseconds()} },
		fence: func(row *sql.Row) (fence int64, err error) {
			err = row.Scan(&fence)
			return fence, err
		},
		releaseArgs: func(key string, fence int64) []any { return []any{key, "w", time.Now().UnixMilli(), fence} },
	})
}

// openSQLite makes r's database, a fresh SQLite file with the combiner off,
// and warms its pair up; done closes and removes it.
func openSQLite(ctx context.Context, r row) (op run.Op, done func(), err error) {
	dir, err := os.MkdirTemp("", "racefree-claimfloor")
	if err != nil {
		return nil, nil, err
	}
	db, err := dsn.Open(ctx, "sqlite:"+filepath.Join(dir, "floor.db"), &racefree.Config{Schema: racefree.SchemaMigrate, Combine: racefree.CombineOff})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return prepareRow(ctx, db, r, func() { db.Close(); os.RemoveAll(dir) }, false)
}

// prepareRow runs r's schema change on db, makes its op and warms it up,
// then, when analyze is set, runs ANALYZE (PostgreSQL: a table without
// statistics can be planned through the expiry index); on an error it
// calls done.
func prepareRow(ctx context.Context, db *racefree.DB, r row, done func(), analyze bool) (run.Op, func(), error) {
	for _, q := range r.ddl {
		if _, err := db.ExecContext(ctx, q); err != nil {
			done()
			return nil, nil, err
		}
	}
	op, err := r.pair(ctx, db)
	if err != nil {
		done()
		return nil, nil, err
	}
	run.For(ctx, 1, *cellTime/10, func(ctx context.Context, c, i int) error { return op(ctx, c+1000, i) })
	if analyze {
		if _, err := db.ExecContext(ctx, "ANALYZE"); err != nil {
			done()
			return nil, nil, err
		}
	}
	return op, done, nil
}

// pair is one acquire and release: their statements, and their
// arguments for a key (the release's with the fence the acquire gave).
type pair struct {
	acquire, release string
	acquireArgs      func(key string) []any
	fence            func(*sql.Row) (int64, error)
	releaseArgs      func(key string, fence int64) []any
}

// pairs prepares p's statements on db and returns the op that runs
// -batch pairs on fresh keys: each statement alone (autocommit) when
// -batch is 1; otherwise the acquires in one transaction, then the
// releases in another.
func pairs(ctx context.Context, db *racefree.DB, p pair) (run.Op, error) {
	acq, err := db.SQL().PrepareContext(ctx, p.acquire)
	if err != nil {
		return nil, err
	}
	rel, err := db.SQL().PrepareContext(ctx, p.release)
	if err != nil {
		return nil, err
	}
	n := max(*batch, 1)
	if n == 1 {
		return func(ctx context.Context, c, i int) error {
			key := fmt.Sprintf("k-%d-%d", c, i)
			fence, err := p.fence(acq.QueryRowContext(ctx, p.acquireArgs(key)...))
			if err != nil {
				return err
			}
			_, err = rel.ExecContext(ctx, p.releaseArgs(key, fence)...)
			return err
		}, nil
	}
	keys, fences := make([]string, n), make([]int64, n)
	return func(ctx context.Context, c, i int) error {
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		a := tx.StmtContext(ctx, acq)
		for k := range n {
			keys[k] = fmt.Sprintf("k-%d-%d-%d", c, i, k)
			if fences[k], err = p.fence(a.QueryRowContext(ctx, p.acquireArgs(keys[k])...)); err != nil {
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if tx, err = db.SQL().BeginTx(ctx, nil); err != nil {
			return err
		}
		defer tx.Rollback()
		r := tx.StmtContext(ctx, rel)
		for k := range n {
			if _, err := r.ExecContext(ctx, p.releaseArgs(keys[k], fences[k])...); err != nil {
				return err
			}
		}
		return tx.Commit()
	}, nil
}
