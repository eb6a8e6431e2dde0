package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/bench/internal/run"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/tenant"
)

// The parts of PostgreSQL's acquire.sql a row takes away, each as the
// text it replaces and the text it puts instead.
const (
	pgTimeline   = `((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40) + 1 AS tl_floor`
	pgNoTimeline = `1::bigint AS tl_floor`
	pgLock       = "WITH locked AS (\n  SELECT 1 FROM racefree_claims AS l WHERE l.tenant = $1 AND l.ns = $2 AND l.key = $3 FOR UPDATE\n), clock AS ("
	pgNoLock     = "WITH clock AS ("
	pgAfterLock  = "\n  FROM (SELECT count(*) FROM locked) AS after_the_lock"
	pgDropExpiry = `DROP INDEX racefree_claims_tenant_expiry`
)

// pgRows are PostgreSQL's rows: the library; its statements sent as it
// sends them on the pool with a role that row-level security does not
// bind (acquire and raise_new in one round trip, one implicit
// transaction; release alone); then without one part at a time; then the
// bare statements.
func pgRows(dir string) ([]row, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		return string(b), err
	}
	acquire, err := read("acquire.sql")
	if err != nil {
		return nil, err
	}
	release, err := read("release.sql")
	if err != nil {
		return nil, err
	}
	raiseNew, err := read("raise_new.sql")
	if err != nil {
		return nil, err
	}
	without := func(q string, parts ...string) (string, error) {
		for i := 0; i < len(parts); i += 2 {
			if !strings.Contains(q, parts[i]) {
				return "", fmt.Errorf("acquire.sql no longer holds %q: mend the PostgreSQL rows of claimfloor", parts[i])
			}
			q = strings.Replace(q, parts[i], parts[i+1], 1)
		}
		return q, nil
	}
	noTimeline, err := without(acquire, pgTimeline, pgNoTimeline)
	if err != nil {
		return nil, err
	}
	noLock, err := without(acquire, pgLock, pgNoLock, pgAfterLock, "")
	if err != nil {
		return nil, err
	}
	noneOf, err := without(noLock, pgTimeline, pgNoTimeline)
	if err != nil {
		return nil, err
	}
	stmts := func(acquire, raise string) func(ctx context.Context, db *racefree.DB) (run.Op, error) {
		return func(ctx context.Context, db *racefree.DB) (run.Op, error) {
			return pgPairs(ctx, db, acquire, raise, release)
		}
	}
	return []row{
		{name: "claim.Acquire + Release (the library, combiner off)", pair: library},
		{name: "racefree's statements on its table, as the library sends them", pair: stmts(acquire, raiseNew)},
		{name: "… without raise_new (acquire alone)", pair: stmts(acquire, "")},
		{name: "… without the timeline's floor", pair: stmts(noTimeline, raiseNew)},
		{name: "… without the lock before the clock", pair: stmts(noLock, raiseNew)},
		{name: "… without the reaper's expiry index", ddl: []string{pgDropExpiry}, pair: stmts(acquire, raiseNew)},
		{name: "… without all four", ddl: []string{pgDropExpiry}, pair: stmts(noneOf, "")},
		{name: "two bare statements on a minimal table", pair: bares},
	}, nil
}

// pgPairs returns the op of one acquire and release of a fresh key on
// db: acquire, then raise_new unless raise is empty, in one pgx batch
// (one round trip, one implicit transaction), then release alone, each
// prepared and cached by pgx as the library's statements are.
func pgPairs(ctx context.Context, db *racefree.DB, acquire, raise, release string) (run.Op, error) {
	conn, err := db.SQL().Conn(ctx)
	if err != nil {
		return nil, err
	}
	var pc *pgx.Conn
	if err := conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("the pool's connections are %T, not pgx's", dc)
		}
		pc = sc.Conn()
		return nil
	}); err != nil {
		return nil, err
	}
	return func(ctx context.Context, c, i int) error {
		key := fmt.Sprintf("k-%d-%d", c, i)
		var b pgx.Batch
		b.Queue(acquire, tenant.Default, "bench", key, "w", ttl.Milliseconds(), nil)
		if raise != "" {
			b.Queue(raise, tenant.Default, "bench", key, "w")
		}
		br := pc.SendBatch(ctx, &b)
		var (
			holder   string
			n        [7]int64
			inserted bool
			raised   int64
		)
		err := br.QueryRow().Scan(&holder, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6], &inserted)
		if err == nil && raise != "" {
			err = br.QueryRow().Scan(&raised)
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		fence := n[0]
		if raised > 0 {
			fence = raised
		}
		tag, err := pc.Exec(ctx, release, tenant.Default, "bench", key, "w", fence, nil)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("release of %s matched %d rows", key, tag.RowsAffected())
		}
		return err
	}, nil
}

// openPostgres makes r's database, a fresh schema on the server at base
// with the combiner off, and warms its pair up; done closes it and drops
// the schema.
func openPostgres(ctx context.Context, base string, r row) (op run.Op, done func(), err error) {
	url, drop, err := run.NewSchema(ctx, base)
	if err != nil {
		return nil, nil, err
	}
	db, err := dsn.Open(ctx, url, &racefree.Config{Schema: racefree.SchemaMigrate, Combine: racefree.CombineOff, MaxOpenConns: 2})
	if err != nil {
		drop()
		return nil, nil, err
	}
	done = func() { db.Close(); drop() }
	return prepareRow(ctx, db, r, done, true)
}
