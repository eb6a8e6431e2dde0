package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/bench/internal/run"
	"github.com/racefree/racefree/internal/wire"
)

// The floor for one operation per commit: the two bare statements of an
// acquire and a release on a minimal table (the key its primary key, the
// holder, the fence and the expiry), no tenant, no namespace, no fence
// floor, no counting, run as a careful application would run them
// (prepared on SQLite; pgx prepares and caches them on PostgreSQL).
const (
	bareTable   = `CREATE TABLE IF NOT EXISTS bench_bare_claims (key TEXT PRIMARY KEY, holder TEXT NOT NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL)`
	bareAcquire = `INSERT INTO bench_bare_claims AS c (key, holder, fence, expires_at) VALUES ($1, $2, 1, CAST($3 AS BIGINT) + CAST($4 AS BIGINT))
ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, fence = c.fence + 1, expires_at = excluded.expires_at
WHERE c.expires_at <= CAST($3 AS BIGINT) RETURNING fence`
	bareRelease = `UPDATE bench_bare_claims SET expires_at = CAST($3 AS BIGINT) WHERE key = $1 AND holder = $2 AND fence = CAST($4 AS BIGINT)`
)

// bare returns one client's pair of bare statements on db's pool.
func bare(ctx context.Context, db *racefree.DB, prefix string) (run.Op, error) {
	if _, err := db.ExecContext(ctx, bareTable); err != nil {
		return nil, err
	}
	acquire, release := bareAcquire, bareRelease
	if db.Engine() == racefree.SQLite {
		acquire, release = strings.ReplaceAll(acquire, "$", "?"), strings.ReplaceAll(release, "$", "?")
	}
	stmt := func(q string) func(ctx context.Context, args ...any) *sql.Row {
		if st := wire.Of(db).Prepared(ctx, q); st != nil {
			return st.QueryRowContext
		}
		return func(ctx context.Context, args ...any) *sql.Row { return db.QueryRowContext(ctx, q, args...) }
	}
	acq := stmt(acquire)
	rel := wire.Of(db).Prepared(ctx, release)
	return func(ctx context.Context, c, i int) error {
		key := fmt.Sprintf("%s-%d-%d", prefix, c, i)
		now := time.Now().UnixMilli()
		var fence int64
		if err := acq(ctx, key, "w", now, ttl.Milliseconds()).Scan(&fence); err != nil {
			return err
		}
		var err error
		if rel != nil {
			_, err = rel.ExecContext(ctx, key, "w", now, fence)
		} else {
			_, err = db.ExecContext(ctx, release, key, "w", now, fence)
		}
		return err
	}, nil
}
