package seq_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/seq"
)

// Each benchmark operation is one transaction that takes the next number
// of a scope's counter and inserts a row carrying it, as an application
// numbering its invoices would, from 16 goroutines spread over 1 or 16
// scopes. Beside seq's single statement run the seed's three statements
// (insert do-nothing, select for update, update) and the alternatives seq
// refuses: MAX(number)+1 with retries on the unique violation, LOCK TABLE
// (PostgreSQL) and a global SEQUENCE (PostgreSQL: not per scope, and gaps
// on rollback, see TestGlobalSequenceLeavesAGapOnRollback).

const benchSchema = `CREATE TABLE bench_docs (scope TEXT NOT NULL, number BIGINT NOT NULL, PRIMARY KEY (scope, number))`

// rebind turns ? into $N on PostgreSQL.
func rebind(engine, q string) string {
	if engine != racefree.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

type numberer func(ctx context.Context, tx *sql.Tx, scope string) (int64, error)

func BenchmarkNext(b *testing.B) {
	for _, engine := range testdb.Engines {
		b.Run(engine, func(b *testing.B) {
			db := testdb.Open(b, testdb.NewDSN(b, engine), &racefree.Config{MaxOpenConns: 16, TxAttempts: 1000})
			ctx := context.Background()
			if _, err := db.ExecContext(ctx, benchSchema); err != nil {
				b.Fatal(err)
			}
			counters := seq.New(db)
			forUpdate := ""
			if engine == racefree.Postgres {
				forUpdate = " FOR UPDATE"
			}
			insertCounter := rebind(engine, `INSERT INTO racefree_sequences (tenant, scope, name, last) VALUES ('default', ?, 'bench3', 0) ON CONFLICT (tenant, scope, name) DO NOTHING`)
			selectCounter := rebind(engine, `SELECT last FROM racefree_sequences WHERE tenant = 'default' AND scope = ? AND name = 'bench3'`+forUpdate)
			updateCounter := rebind(engine, `UPDATE racefree_sequences SET last = ? WHERE tenant = 'default' AND scope = ? AND name = 'bench3'`)
			maxPlusOne := rebind(engine, `SELECT COALESCE(MAX(number), 0) + 1 FROM bench_docs WHERE scope = ?`)
			variants := []struct {
				name     string
				postgres bool // PostgreSQL only
				maxRetry bool // retry on a unique violation of bench_docs
				next     numberer
			}{
				{name: "seq", next: func(ctx context.Context, tx *sql.Tx, scope string) (int64, error) {
					return counters.Next(ctx, tx, scope, "bench")
				}},
				{name: "three-statements", next: func(ctx context.Context, tx *sql.Tx, scope string) (int64, error) {
					if _, err := tx.ExecContext(ctx, insertCounter, scope); err != nil {
						return 0, err
					}
					var last int64
					if err := tx.QueryRowContext(ctx, selectCounter, scope).Scan(&last); err != nil {
						return 0, err
					}
					_, err := tx.ExecContext(ctx, updateCounter, last+1, scope)
					return last + 1, err
				}},
				{name: "max-plus-one", maxRetry: true, next: func(ctx context.Context, tx *sql.Tx, scope string) (int64, error) {
					var n int64
					err := tx.QueryRowContext(ctx, maxPlusOne, scope).Scan(&n)
					return n, err
				}},
				{name: "lock-table", postgres: true, next: func(ctx context.Context, tx *sql.Tx, scope string) (int64, error) {
					if _, err := tx.ExecContext(ctx, `LOCK TABLE bench_docs IN EXCLUSIVE MODE`); err != nil {
						return 0, err
					}
					var n int64
					err := tx.QueryRowContext(ctx, maxPlusOne, scope).Scan(&n)
					return n, err
				}},
				{name: "global-sequence", postgres: true, next: func(ctx context.Context, tx *sql.Tx, scope string) (int64, error) {
					var n int64
					err := tx.QueryRowContext(ctx, `SELECT nextval('bench_numbers')`).Scan(&n)
					return n, err
				}},
			}
			if engine == racefree.Postgres {
				if _, err := db.ExecContext(ctx, `CREATE SEQUENCE bench_numbers`); err != nil {
					b.Fatal(err)
				}
			}
			insertDoc := rebind(engine, `INSERT INTO bench_docs (scope, number) VALUES (?, ?)`)
			run := 0
			for _, v := range variants {
				if v.postgres && engine != racefree.Postgres {
					continue
				}
				for _, scopes := range []int{1, 16} {
					b.Run(fmt.Sprintf("%s/scopes=%d", v.name, scopes), func(b *testing.B) {
						run++
						prefix := fmt.Sprintf("r%d-", run) // fresh scopes per run
						var worker atomic.Int64
						var retries atomic.Int64
						b.SetParallelism(8) // 16 goroutines on 2 CPUs
						b.RunParallel(func(pb *testing.PB) {
							scope := fmt.Sprintf("%s%d", prefix, worker.Add(1)%int64(scopes))
							for pb.Next() {
								for {
									err := db.InTx(ctx, func(tx *sql.Tx) error {
										n, err := v.next(ctx, tx, scope)
										if err != nil {
											return err
										}
										_, err = tx.ExecContext(ctx, insertDoc, scope, n)
										return err
									})
									if v.maxRetry && errors.Is(wire.Of(db).InterpretError(err), racefree.ErrConflict) {
										retries.Add(1)
										continue
									}
									if err != nil {
										b.Error(err)
										return
									}
									break
								}
							}
						})
						b.ReportMetric(float64(retries.Load())/float64(b.N), "retries/op")
					})
				}
			}
		})
	}
}

// BenchmarkStatements compares seq's single statement with the seed's three
// (insert do-nothing, select for update, update) from one goroutine, so
// that the figure is the cost of the statements and not of the waiting.
// Each iteration runs both, one transaction each, in alternating order,
// and reports each one's mean (seq-ns/op, three-ns/op): a machine whose
// load drifts during the run slows both alike.
func BenchmarkStatements(b *testing.B) {
	for _, engine := range testdb.Engines {
		b.Run(engine, func(b *testing.B) {
			db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
			ctx := context.Background()
			counters := seq.New(db)
			forUpdate := ""
			if engine == racefree.Postgres {
				forUpdate = " FOR UPDATE"
			}
			insertCounter := rebind(engine, `INSERT INTO racefree_sequences (tenant, scope, name, last) VALUES ('default', ?, 'bench3', 0) ON CONFLICT (tenant, scope, name) DO NOTHING`)
			selectCounter := rebind(engine, `SELECT last FROM racefree_sequences WHERE tenant = 'default' AND scope = ? AND name = 'bench3'`+forUpdate)
			updateCounter := rebind(engine, `UPDATE racefree_sequences SET last = ? WHERE tenant = 'default' AND scope = ? AND name = 'bench3'`)
			one := func(tx *sql.Tx) error {
				_, err := counters.Next(ctx, tx, "acme", "bench")
				return err
			}
			three := func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, insertCounter, "acme"); err != nil {
					return err
				}
				var last int64
				if err := tx.QueryRowContext(ctx, selectCounter, "acme").Scan(&last); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, updateCounter, last+1, "acme")
				return err
			}
			var spent [2]time.Duration
			run := func(i int, fn func(*sql.Tx) error) {
				start := time.Now()
				if err := db.InTx(ctx, fn); err != nil {
					b.Fatal(err)
				}
				spent[i] += time.Since(start)
			}
			n := 0
			for b.Loop() {
				if n%2 == 0 {
					run(0, one)
					run(1, three)
				} else {
					run(1, three)
					run(0, one)
				}
				n++
			}
			b.ReportMetric(float64(spent[0].Nanoseconds())/float64(n), "seq-ns/op")
			b.ReportMetric(float64(spent[1].Nanoseconds())/float64(n), "three-ns/op")
		})
	}
}
