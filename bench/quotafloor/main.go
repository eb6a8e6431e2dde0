// Command quotafloor measures what SQLite's one writer spends on a batch
// of charges of one hot quota key, per charge, in the forms a batch can
// take. racefree's charge statement (quota/sql/sqlite/consume_gcra.sql,
// read from the repository) runs once per charge:
//   - prepared on the pool and run in a *sql.Tx, as the combiner ran its
//     batches before it had a writer; then rebound to the transaction once
//     a batch rather than once a charge; then without its RETURNING clause,
//     each charge followed by a read of the counter;
//   - on one connection kept out of the pool, prepared there, with BEGIN
//     IMMEDIATE and COMMIT as prepared statements rather than a *sql.Tx:
//     the combiner's writer (writer.go); then with the connection taken
//     and the statement prepared anew for each batch; then through the
//     driver's connection directly (sql.Conn.Raw), with nothing of
//     database/sql around a statement; then the batch's charges, all of
//     one size, as one statement that admits the first k that fit, after
//     a read of the counter (consume_gcra_fold.sql's form, which the
//     combiner's batches now run on SQLite: quota.go, foldGCRA);
//
// and, last, one statement over a JSON array of the batch's charges that
// folds them one after the other (a recursive CTE), then one write of
// the counter's last state.
//
// Each row is a fresh SQLite file and one client running -batch charges
// of one key in one transaction, as a combiner's batch does at its best;
// one second divided by a charge's CPU is about the most charges a second
// any number of clients could get from that form. The rows run
// alternately, slice by slice, so that a shared machine's load falls on
// all of them alike.
//
//	go run ./quotafloor              # 3 s a row, 11 charges a transaction
//	go run ./quotafloor -short       # 200 ms a row: checks that it runs
//
// Before timing, each form charges a key -batch times and must leave the
// counter where racefree's statement one charge at a time leaves it.
package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/bench/internal/run"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/tenant"
)

var (
	short    = flag.Bool("short", false, "run each row for 200 ms")
	cellTime = flag.Duration("time", 3*time.Second, "how long each row runs")
	sqlDir   = flag.String("sql", "../quota/sql/sqlite", "the directory of racefree's SQLite quota statements")
	batch    = flag.Int("batch", 11, "charges of the one key per transaction (11: the combined hot-key cell's batches in bench/quota)")
)

// The policy of every charge: 1000 a second, a burst that admits them
// all, as in bench/quota; T is its emission interval in ms.
const (
	interval = 1
	burst    = 1 << 40
)

// read is the counter after a charge: changes() says whether it was
// allowed (the charge statement without RETURNING ran just before).
const read = `SELECT changes() > 0, tat, used, updated_at FROM racefree_quotas
WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'gcra'`

// fold decides ?1's charges (a JSON array of [n, T, B, now]) one after
// the other from the counter of (?2, ?3, ?4), as consume_gcra.sql would
// one statement at a time, and returns each one's place, decision and
// counter after it.
const fold = `WITH RECURSIVE f(place, tat, allowed, now) AS (
  SELECT 0, (SELECT tat FROM racefree_quotas WHERE tenant = ?2 AND scope = ?3 AND key = ?4 AND kind = 'gcra'), NULL, NULL
  UNION ALL
  SELECT f.place + 1,
    CASE WHEN MAX(COALESCE(f.tat, j.now), j.now) + j.n * j.t <= j.now + j.b * j.t
      THEN MAX(COALESCE(f.tat, j.now), j.now) + j.n * j.t ELSE f.tat END,
    MAX(COALESCE(f.tat, j.now), j.now) + j.n * j.t <= j.now + j.b * j.t,
    j.now
  FROM f JOIN (SELECT key AS i, value ->> 0 AS n, value ->> 1 AS t, value ->> 2 AS b, value ->> 3 AS now FROM json_each(?1)) AS j
    ON j.i = f.place)
SELECT place, allowed, tat, 0, now FROM f WHERE place > 0`

// foldWrite writes the counter's state after fold's last charge.
const foldWrite = `INSERT INTO racefree_quotas AS q (tenant, scope, key, kind, tat, used, updated_at, expires_at)
VALUES (?1, ?2, ?3, 'gcra', ?4, 0, ?5, ?4)
ON CONFLICT (tenant, scope, key, kind) DO UPDATE SET tat = excluded.tat, updated_at = excluded.updated_at, expires_at = excluded.expires_at`

func main() { run.Main(short, cellTime, bench) }

// form is one way to run a batch: prepare readies it on a fresh DB and
// returns the function that charges key n times in one transaction at
// the clock now and returns the counter's tat after the last charge.
type form struct {
	name    string
	prepare func(ctx context.Context, db *racefree.DB) (func(ctx context.Context, key string, n int, now int64) (int64, error), error)
}

func bench() error {
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(*sqlDir, "consume_gcra.sql"))
	if err != nil {
		return err
	}
	charge := string(b)
	i := strings.LastIndex(charge, "RETURNING")
	if i < 0 {
		return errors.New("consume_gcra.sql has no RETURNING clause")
	}
	chargeOnly := charge[:i]
	// A batch's charges of one key, all of one size, as the combiner
	// folds them: the counter read, then one statement for all of them.
	var hotRead, hotCharge string
	for name, q := range map[string]*string{"fold_gcra_read.sql": &hotRead, "consume_gcra_fold.sql": &hotCharge} {
		b, err := os.ReadFile(filepath.Join(*sqlDir, name))
		if err != nil {
			return err
		}
		*q = string(b)
	}
	args := func(key string, now int64) []any {
		return []any{tenant.Default, "bench", key, int64(1), int64(interval), int64(burst), now}
	}
	forms := []form{
		{"racefree's statement, prepared on the pool, in a *sql.Tx (the combiner's batches before its writer)", func(ctx context.Context, db *racefree.DB) (func(context.Context, string, int, int64) (int64, error), error) {
			st, err := db.SQL().PrepareContext(ctx, charge)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, key string, n int, now int64) (int64, error) {
				return inTx(ctx, db, func(tx *sql.Tx) (int64, error) {
					return charges(n, func() *sql.Row { return tx.StmtContext(ctx, st).QueryRowContext(ctx, args(key, now)...) })
				})
			}, nil
		}},
		{"… rebound to the transaction once a batch, not once a charge", func(ctx context.Context, db *racefree.DB) (func(context.Context, string, int, int64) (int64, error), error) {
			st, err := db.SQL().PrepareContext(ctx, charge)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, key string, n int, now int64) (int64, error) {
				return inTx(ctx, db, func(tx *sql.Tx) (int64, error) {
					ts := tx.StmtContext(ctx, st)
					return charges(n, func() *sql.Row { return ts.QueryRowContext(ctx, args(key, now)...) })
				})
			}, nil
		}},
		{"… without RETURNING, then a read of the counter", func(ctx context.Context, db *racefree.DB) (func(context.Context, string, int, int64) (int64, error), error) {
			st, err := db.SQL().PrepareContext(ctx, chargeOnly)
			if err != nil {
				return nil, err
			}
			rd, err := db.SQL().PrepareContext(ctx, read)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, key string, n int, now int64) (int64, error) {
				return inTx(ctx, db, func(tx *sql.Tx) (int64, error) {
					var allowed bool
					var tat, used, at int64
					for range n {
						if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, args(key, now)...); err != nil {
							return 0, err
						}
						if err := tx.StmtContext(ctx, rd).QueryRowContext(ctx, tenant.Default, "bench", key).Scan(&allowed, &tat, &used, &at); err != nil {
							return 0, err
						}
					}
					return tat, nil
				})
			}, nil
		}},
		{"on one connection kept, prepared there, BEGIN and COMMIT as prepared statements, no *sql.Tx (the combiner's writer)", func(ctx context.Context, db *racefree.DB) (func(context.Context, string, int, int64) (int64, error), error) {
			conn, err := db.SQL().Conn(ctx)
			if err != nil {
				return nil, err
			}
			st, err := conn.PrepareContext(ctx, charge)
			if err != nil {
				return nil, err
			}
			var begin, commit *sql.Stmt
			if begin, err = conn.PrepareContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				return nil, err
			}
			if commit, err = conn.PrepareContext(ctx, "COMMIT"); err != nil {
				return nil, err
			}
			return func(ctx context.Context, key string, n int, now int64) (int64, error) {
				if _, err := begin.ExecContext(ctx); err != nil {
					return 0, err
				}
				tat, err := charges(n, func() *sql.Row { return st.QueryRowContext(ctx, args(key, now)...) })
				if err != nil {
					_, _ = conn.ExecContext(ctx, "ROLLBACK")
					return 0, err
				}
				_, err = commit.ExecContext(ctx)
				return tat, err
			}, nil
		}},
		{"… the connection taken from the pool, and the statement prepared, for each batch", func(ctx context.Context, db *racefree.DB) (func(context.Context, string, int, int64) (int64, error), error) {
			return func(ctx context.Context, key string, n int, now int64) (int64, error) {
				conn, err := db.SQL().Conn(ctx)
				if err != nil {
					return 0, err
				}
				defer conn.Close()
				st, err := conn.PrepareContext(ctx, charge)
				if err != nil {
					return 0, err
				}
				defer st.Close()
				if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
					return 0, err
				}
				tat, err := charges(n, func() *sql.Row { return st.QueryRowContext(ctx, args(key, now)...) })
				if err != nil {
					_, _ = conn.ExecContext(ctx, "ROLLBACK")
					return 0, err
				}
				_, err = conn.ExecContext(ctx, "COMMIT")
				return tat, err
			}, nil
		}},
		{"… through the driver's connection directly (sql.Conn.Raw): nothing of database/sql around a statement", func(ctx context.Context, db *racefree.DB) (func(context.Context, string, int, int64) (int64, error), error) {
			conn, err := db.SQL().Conn(ctx)
			if err != nil {
				return nil, err
			}
			var st driver.Stmt
			if err := conn.Raw(func(dc any) error {
				st, err = dc.(driver.ConnPrepareContext).PrepareContext(ctx, charge)
				return err
			}); err != nil {
				return nil, err
			}
			dest := make([]driver.Value, 4)
			return func(ctx context.Context, key string, n int, now int64) (tat int64, err error) {
				err = conn.Raw(func(dc any) error {
					ex := dc.(driver.ExecerContext)
					if _, err := ex.ExecContext(ctx, "BEGIN IMMEDIATE", nil); err != nil {
						return err
					}
					for range n {
						rows, err := st.(driver.StmtQueryContext).QueryContext(ctx, named(args(key, now)))
						if err == nil {
							err = rows.Next(dest)
							rows.Close()
						}
						if err != nil {
							_, _ = ex.ExecContext(ctx, "ROLLBACK", nil)
							return err
						}
						tat = dest[1].(int64)
					}
					_, err := ex.ExecContext(ctx, "COMMIT", nil)
					return err
				})
				return tat, err
			}, nil
		}},
		{"… the batch's charges of the key, all of one size, as one statement that admits the first k (consume_gcra_fold.sql, after fold_gcra_read.sql), through the driver directly (the combiner's folds)", func(ctx context.Context, db *racefree.DB) (func(context.Context, string, int, int64) (int64, error), error) {
			conn, err := db.SQL().Conn(ctx)
			if err != nil {
				return nil, err
			}
			var rd, ch driver.Stmt
			if err := conn.Raw(func(dc any) error {
				pc := dc.(driver.ConnPrepareContext)
				if rd, err = pc.PrepareContext(ctx, hotRead); err != nil {
					return err
				}
				ch, err = pc.PrepareContext(ctx, hotCharge)
				return err
			}); err != nil {
				return nil, err
			}
			dest := make([]driver.Value, 1)
			return func(ctx context.Context, key string, n int, now int64) (tat int64, err error) {
				err = conn.Raw(func(dc any) error {
					ex := dc.(driver.ExecerContext)
					if _, err := ex.ExecContext(ctx, "BEGIN IMMEDIATE", nil); err != nil {
						return err
					}
					fail := func(err error) error {
						_, _ = ex.ExecContext(ctx, "ROLLBACK", nil)
						return err
					}
					rows, err := rd.(driver.StmtQueryContext).QueryContext(ctx, named([]any{tenant.Default, "bench", key}))
					if err != nil {
						return fail(err)
					}
					if err := rows.Next(dest[:1]); err != nil && !errors.Is(err, io.EOF) {
						rows.Close()
						return fail(err)
					}
					rows.Close()
					rows, err = ch.(driver.StmtQueryContext).QueryContext(ctx, named(append(args(key, now), int64(n))))
					if err == nil {
						err = rows.Next(dest)
						rows.Close()
					}
					if err != nil {
						return fail(err)
					}
					tat = dest[0].(int64)
					_, err = ex.ExecContext(ctx, "COMMIT", nil)
					return err
				})
				return tat, err
			}, nil
		}},
		{"one statement over a JSON array of the charges, folded, then one write (in a *sql.Tx)", func(ctx context.Context, db *racefree.DB) (func(context.Context, string, int, int64) (int64, error), error) {
			fd, err := db.SQL().PrepareContext(ctx, fold)
			if err != nil {
				return nil, err
			}
			wr, err := db.SQL().PrepareContext(ctx, foldWrite)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, key string, n int, now int64) (int64, error) {
				js := make([]byte, 0, 32*n)
				js = append(js, '[')
				for k := range n {
					if k > 0 {
						js = append(js, ',')
					}
					js = fmt.Appendf(js, "[1,%d,%d,%d]", interval, burst, now)
				}
				js = append(js, ']')
				tx, err := db.SQL().BeginTx(ctx, nil)
				if err != nil {
					return 0, err
				}
				defer tx.Rollback()
				rows, err := tx.StmtContext(ctx, fd).QueryContext(ctx, string(js), tenant.Default, "bench", key)
				if err != nil {
					return 0, err
				}
				var place, tat, used, at int64
				var allowed bool
				got := 0
				for rows.Next() {
					if err := rows.Scan(&place, &allowed, &tat, &used, &at); err != nil {
						rows.Close()
						return 0, err
					}
					got++
				}
				if err := rows.Close(); err != nil {
					return 0, err
				}
				if got != n {
					return 0, fmt.Errorf("the fold returned %d rows for %d charges", got, n)
				}
				if _, err := tx.StmtContext(ctx, wr).ExecContext(ctx, tenant.Default, "bench", key, tat, now); err != nil {
					return 0, err
				}
				return tat, tx.Commit()
			}, nil
		}},
	}
	n := max(*batch, 1)
	ops := make([]run.Op, len(forms))
	var want int64
	for i, f := range forms {
		do, done, err := open(ctx, f)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		defer done()
		// Two batches on one key at one clock: the counter must end
		// where racefree's statement one charge at a time leaves it.
		var tat int64
		for range 2 {
			if tat, err = do(ctx, "check", n, 1_000_000); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
		if i == 0 {
			want = tat
		} else if tat != want {
			return fmt.Errorf("%s: the counter ends at %d after %d charges; racefree's statement leaves it at %d", f.name, tat, 2*n, want)
		}
		ops[i] = func(ctx context.Context, c, i int) error {
			_, err := do(ctx, "hot", n, time.Now().UnixMilli())
			return err
		}
		run.For(ctx, 1, *cellTime/10, ops[i])
	}
	results := run.Alternately(ctx, 1, *cellTime, ops...)
	fmt.Printf("Charges of one hot quota key on SQLite, %d in each transaction, one client, %v a row.\n\n", n, *cellTime)
	fmt.Println("| what runs | charges/s | CPU per charge | one core's most charges/s | first row / this (CPU) |")
	fmt.Println("|---|---|---|---|---|")
	for i, f := range forms {
		cpu := results[i].CPU / time.Duration(n)
		fmt.Printf("| %s | %.0f | %v | %.0f | %.2f× |\n", f.name, results[i].Rate*float64(n), cpu.Round(100*time.Nanosecond),
			float64(time.Second)/float64(cpu), float64(results[0].CPU)/float64(results[i].CPU))
	}
	return nil
}

// open makes f's database, a fresh SQLite file, and readies f on it;
// done closes and removes it.
func open(ctx context.Context, f form) (do func(context.Context, string, int, int64) (int64, error), done func(), err error) {
	dir, err := os.MkdirTemp("", "racefree-quotafloor")
	if err != nil {
		return nil, nil, err
	}
	db, err := dsn.Open(ctx, "sqlite:"+filepath.Join(dir, "floor.db"), &racefree.Config{Schema: racefree.SchemaMigrate, Combine: racefree.CombineOff})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	done = func() { db.Close(); os.RemoveAll(dir) }
	if do, err = f.prepare(ctx, db); err != nil {
		done()
		return nil, nil, err
	}
	return do, done, nil
}

// charges runs n charges, each the row that row returns, and returns the
// counter's tat after the last.
func charges(n int, row func() *sql.Row) (int64, error) {
	var allowed bool
	var tat, used, at int64
	for range n {
		if err := row().Scan(&allowed, &tat, &used, &at); err != nil {
			return 0, err
		}
	}
	return tat, nil
}

// inTx runs f in a transaction of db's pool and commits it.
func inTx(ctx context.Context, db *racefree.DB, f func(*sql.Tx) (int64, error)) (int64, error) {
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	tat, err := f(tx)
	if err != nil {
		return 0, err
	}
	return tat, tx.Commit()
}

func named(args []any) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return nv
}
