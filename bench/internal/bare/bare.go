// Package bare holds the floor the claim benchmarks compare racefree
// with: the two bare statements of an acquire and a release.
package bare

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

// Statements returns, in engine's placeholders, the statement that
// creates the minimal table (if it does not exist) and the acquire and
// release on it. The acquire's arguments are the key, the holder, now and
// the TTL in milliseconds, and it returns the fence (no row: the key is
// held); the release's are the key, the holder, now and the fence.
func Statements(engine string) (table, acquire, release string) {
	if engine == racefree.SQLite {
		return bareTable, strings.ReplaceAll(bareAcquire, "$", "?"), strings.ReplaceAll(bareRelease, "$", "?")
	}
	return bareTable, bareAcquire, bareRelease
}

// Pair returns one client's pair of bare statements on db's pool, each
// call on a fresh key (prefix, the client, the call) taken for ttl.
func Pair(ctx context.Context, db *racefree.DB, prefix string, ttl time.Duration) (run.Op, error) {
	table, acquire, release := Statements(db.Engine())
	if _, err := db.ExecContext(ctx, table); err != nil {
		return nil, err
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
