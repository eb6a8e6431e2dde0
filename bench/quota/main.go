// Command quota measures quota.Consume, with the combiner off and on
// ([racefree.Config.Combine]), beside the bare statement it runs and beside
// github.com/go-redis/redis_rate on a local Redis, on SQLite and
// PostgreSQL, at 1 and 16 clients, on distinct keys and on one hot key, and
// prints a Markdown table of the figures and their ratios, and one of the
// CPU time each charge cost (run.Result), and draws them as a PNG chart
// (-chart, quota.png). The sides of a cell (racefree's and redis_rate's)
// run alternately, slice by slice, so that a shared machine's load falls
// on all alike; read the ratios and the CPU time per charge, not the
// absolute rates.
//
//	go run ./quota            # 3 s a cell
//	go run ./quota -short -chart ''   # 200 ms a cell, no chart: checks that it runs
//
// PostgreSQL comes from TEST_DATABASE_URL (a schema of its own, dropped at
// the end), Redis from -redis (127.0.0.1:6379); a missing one is left out
// of the table with a note.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/bench/internal/chart"
	"github.com/racefree/racefree/bench/internal/run"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/tenant"
	"github.com/redis/go-redis/v9"
)

var (
	short     = flag.Bool("short", false, "run each cell for 200 ms (CI)")
	cellTime  = flag.Duration("time", 3*time.Second, "how long each cell runs")
	redisAddr = flag.String("redis", "127.0.0.1:6379", "Redis address for redis_rate")
	denyOnly  = flag.Bool("deny", false, "measure only the denial path (PostgreSQL)")
	chartPath = flag.String("chart", "quota.png", "write the admitted charges as a PNG chart to this file (empty: none)")
)

// The policy every cell charges: 1000 a second with a burst large enough
// that every charge is admitted, so every cell measures the write path.
var policy = quota.Policy{Kind: quota.GCRA, Rate: 1000, Per: time.Second, Burst: quota.MaxUnits, Wait: time.Minute}

// denyPolicy refuses every charge after the first: the denial path.
var denyPolicy = quota.Policy{Kind: quota.GCRA, Rate: 1, Per: time.Hour, Burst: 1, Wait: time.Minute}

func main() { run.Main(short, cellTime, bench) }

func bench() error {
	ctx := context.Background()
	var notes []string
	dbs := map[string]*racefree.DB{}
	combined := map[string]*racefree.DB{} // the same databases, Config.Combine on
	engines, note, cleanup, err := run.Engines(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	for _, e := range engines {
		db, err := dsn.Open(ctx, e.DSN, &racefree.Config{Schema: racefree.SchemaMigrate, MaxOpenConns: 16, Combine: racefree.CombineOff})
		if err != nil {
			return err
		}
		defer db.Close()
		dbs[e.Name] = db
		on, err := dsn.Open(ctx, e.DSN, &racefree.Config{Schema: racefree.SchemaMigrate, MaxOpenConns: 16, Combine: racefree.CombineOn})
		if err != nil {
			return err
		}
		defer on.Close()
		combined[e.Name] = on
		if e.Name == racefree.Postgres {
			n, err := run.AutovacuumNote(ctx, e.DSN)
			if err != nil {
				return err
			}
			if n != "" {
				notes = append(notes, n)
			}
		}
	}
	if note != "" {
		notes = append(notes, note)
	}
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: 32})
	defer rdb.Close()
	var limiter *redis_rate.Limiter
	if err := rdb.Ping(ctx).Err(); err == nil {
		limiter = redis_rate.NewLimiter(rdb)
	} else {
		notes = append(notes, fmt.Sprintf("redis_rate left out: Redis at %s: %v.", *redisAddr, err))
	}

	fmt.Printf("Admitted charges per second, %s a cell (higher is better).\n\n", *cellTime)
	fmt.Println("racefree runs with a Policy.Wait (a timer per charge), with NoWait (the caller's context only), and with the default Wait through the combiner (Config.Combine).")
	fmt.Println()
	fmt.Println("| engine | clients | keys | racefree | racefree NoWait | racefree, combiner | combiner / off | bare statement | racefree / bare (default / NoWait) | redis_rate | racefree / redis_rate (default / NoWait / combiner) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	var (
		allPanels []chart.Panel
		cpuRows   []string // CPU time per charge of each cell, printed after the table
	)
	for _, engine := range []string{racefree.SQLite, racefree.Postgres} {
		db := dbs[engine]
		if db == nil || *denyOnly {
			continue
		}
		l, err := quota.New(db, &quota.Options{Scope: "bench"})
		if err != nil {
			return err
		}
		on := combined[engine]
		lOn, err := quota.New(on, &quota.Options{Scope: "bench"})
		if err != nil {
			return err
		}
		// Warm both pools alike, then ANALYZE: on a table without
		// statistics PostgreSQL may look a counter up through the expiry
		// index, which made combined batches 40 times slower here (README:
		// ANALYZE after migrate up; autovacuum does so in time).
		warm := func(l *quota.Limiter, db *racefree.DB, prefix string) run.Op {
			return func(ctx context.Context, c, i int) error {
				_, err := l.Consume(ctx, db, fmt.Sprintf("%s-%d-%d", prefix, c, i), 1, policy)
				return err
			}
		}
		run.Alternately(ctx, 16, 500*time.Millisecond, warm(l, db, "warm-off"), warm(lOn, on, "warm-on"))
		if _, err := db.ExecContext(ctx, "ANALYZE"); err != nil {
			return err
		}
		bare, err := readQuery(engine, "consume_gcra")
		if err != nil {
			return err
		}
		// On SQLite the library runs the statement prepared once per
		// connection (wire.DB.Prepared), and so does the bare
		// statement; on PostgreSQL both send its text.
		bareStmt := wire.Of(db).Prepared(ctx, string(bare))
		interval := (policy.Per.Milliseconds() + policy.Rate - 1) / policy.Rate
		panels := map[bool]*chart.Panel{}
		for _, hot := range []bool{false, true} {
			title := engine + ", distinct keys"
			if hot {
				title = engine + ", one hot key"
			}
			panels[hot] = &chart.Panel{Title: title, Series: []chart.Series{{Name: "racefree"}, {Name: "racefree NoWait"},
				{Name: "racefree, combiner"}, {Name: "bare statement"}, {Name: "redis_rate"}}}
		}
		for _, clients := range []int{1, 16} {
			for _, hot := range []bool{false, true} {
				cellRun := fmt.Sprintf("%s-%d-%t-%d", engine, clients, hot, time.Now().UnixNano())
				key := keyFunc(cellRun, hot)
				keyBare, keyNoWait := keyFunc(cellRun+"-bare", hot), keyFunc(cellRun+"-nowait", hot)
				keyOn := keyFunc(cellRun+"-combiner", hot)
				noWait := policy
				noWait.Wait = quota.NoWait
				sides := []run.Op{func(ctx context.Context, c, i int) error {
					d, err := l.Consume(ctx, db, key(c, i), 1, policy)
					if err == nil && !d.Allowed {
						err = fmt.Errorf("denied")
					}
					return err
				}, func(ctx context.Context, c, i int) error {
					d, err := l.Consume(ctx, db, keyNoWait(c, i), 1, noWait)
					if err == nil && !d.Allowed {
						err = fmt.Errorf("denied")
					}
					return err
				}, func(ctx context.Context, c, i int) error {
					var (
						allowed        bool
						tat, used, now int64
					)
					args := []any{tenant.Default, "bench", keyBare(c, i), 1, interval, policy.Burst, nil}
					if bareStmt != nil {
						return bareStmt.QueryRowContext(ctx, args...).Scan(&allowed, &tat, &used, &now)
					}
					return db.QueryRowContext(ctx, string(bare), args...).Scan(&allowed, &tat, &used, &now)
				}, func(ctx context.Context, c, i int) error {
					d, err := lOn.Consume(ctx, on, keyOn(c, i), 1, policy)
					if err == nil && !d.Allowed {
						err = fmt.Errorf("denied")
					}
					return err
				}}
				if limiter != nil {
					// redis_rate alternates with racefree's sides, slice by
					// slice, so that the ratios face the same load.
					keyRedis := keyFunc(cellRun+"-redis", hot)
					lim := redis_rate.Limit{Rate: int(policy.Rate), Period: policy.Per, Burst: int(policy.Burst)}
					sides = append(sides, func(ctx context.Context, c, i int) error {
						res, err := limiter.Allow(ctx, keyRedis(c, i), lim)
						if err == nil && res.Allowed == 0 {
							err = fmt.Errorf("redis_rate denied")
						}
						return err
					})
				}
				if err := run.FreshStatistics(ctx, db, "racefree_quotas"); err != nil {
					return err
				}
				before := on.CombineStats()
				ops := run.Alternately(ctx, clients, *cellTime, sides...)
				if s := on.CombineStats(); s.Batches > before.Batches {
					n := s.Batches - before.Batches
					notes = append(notes, fmt.Sprintf("%s, %d clients, %s: the combiner's batches held %.1f charges on average, mean queue wait %s.",
						engine, clients, cellKeys(hot), float64(s.Ops-before.Ops)/float64(n), ((s.QueueWait-before.QueueWait)/time.Duration(max(s.Ops-before.Ops, 1))).Round(time.Microsecond)))
				}
				lib, libNoWait, bareOps, libOn := ops[0].Rate, ops[1].Rate, ops[2].Rate, ops[3].Rate
				keys := cellKeys(hot)
				redisCell, ratio, rr, redisCPU := "—", "—", math.NaN(), "—"
				if limiter != nil {
					rr = ops[4].Rate
					redisCell, redisCPU = fmt.Sprintf("%.0f", rr), cpu(ops[4])
					ratio = fmt.Sprintf("%.2f× / %.2f× / %.2f×", lib/rr, libNoWait/rr, libOn/rr)
				}
				cpuRows = append(cpuRows, fmt.Sprintf("| %s | %d | %s | %s | %s | %s | %s | %s |", engine, clients, keys,
					cpu(ops[0]), cpu(ops[1]), cpu(ops[3]), cpu(ops[2]), redisCPU))
				fmt.Printf("| %s | %d | %s | %.0f | %.0f | %.0f | %.2f× | %.0f | %.2f / %.2f | %s | %s |\n", engine, clients, keys, lib, libNoWait, libOn, libOn/lib,
					bareOps, lib/bareOps, libNoWait/bareOps, redisCell, ratio)
				p := panels[hot]
				p.X = append(p.X, fmt.Sprint(clients))
				for i, v := range []float64{lib, libNoWait, libOn, bareOps, rr} {
					p.Series[i].Values = append(p.Series[i].Values, v)
				}
			}
		}
		allPanels = append(allPanels, *panels[false], *panels[true])
		if s := on.CombineStats(); s.Batches > 0 {
			notes = append(notes, fmt.Sprintf("%s combiner: %d batches of %.1f charges on average (largest %d), mean queue wait %s, %d failed batches.",
				engine, s.Batches, float64(s.Ops)/float64(s.Batches), s.MaxBatch, (s.QueueWait/time.Duration(max(s.Ops, 1))).Round(time.Microsecond), s.Failed))
		}
	}
	fmt.Println()
	fmt.Println("CPU time per charge, this process (the clients, racefree, and SQLite, which runs inside it) + the servers (PostgreSQL's backends of this benchmark and its writers, Redis): steadier than a rate on a shared machine.")
	fmt.Println()
	fmt.Println("| engine | clients | keys | racefree | racefree NoWait | racefree, combiner | bare statement | redis_rate |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range cpuRows {
		fmt.Println(r)
	}
	fmt.Println()
	fmt.Printf("Denied charges per second, 1 client, one exhausted key: the library's one statement (the refusing upsert and, in a CTE, the read of the counter it refused on) beside two statements (the upsert, then the read).\n\n")
	fmt.Println("| engine | racefree (1 statement) | 2 statements | ratio |")
	fmt.Println("|---|---|---|---|")
	for _, engine := range []string{racefree.Postgres} {
		db := dbs[engine]
		if db == nil {
			continue
		}
		l, err := quota.New(db, &quota.Options{Scope: "bench-deny"})
		if err != nil {
			return err
		}
		if _, err := l.Consume(ctx, db, "exhausted", 1, denyPolicy); err != nil {
			return err
		}
		interval := denyPolicy.Per.Milliseconds() / denyPolicy.Rate
		state, err := readQuery(engine, "state")
		if err != nil {
			return err
		}
		denials := run.Alternately(ctx, 1, *cellTime, func(ctx context.Context, c, i int) error {
			d, err := l.Consume(ctx, db, "exhausted", 1, denyPolicy)
			if err == nil && (d.Allowed || d.RetryAfter <= 0) {
				err = fmt.Errorf("not a denial: %+v", d)
			}
			return err
		}, func(ctx context.Context, c, i int) error {
			var tat, used, now int64
			err := db.QueryRowContext(ctx, twoStatements, tenant.Default, "bench-deny", "exhausted", 1, interval, denyPolicy.Burst, nil).Scan(&tat, &used, &now)
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("not a denial: %v", err)
			}
			var t, u sql.NullInt64
			return db.QueryRowContext(ctx, string(state), tenant.Default, "bench-deny", "exhausted", "gcra", nil).Scan(&now, &t, &u)
		})
		fmt.Printf("| %s | %.0f | %.0f | %.2f |\n", engine, denials[0].Rate, denials[1].Rate, denials[0].Rate/denials[1].Rate)
	}
	run.PrintNotes(notes)
	if *chartPath != "" && len(allPanels) > 0 {
		if err := chart.Write(*chartPath, "quota.Consume, admitted charges per second", "charges/s", allPanels, 2); err != nil {
			return err
		}
		fmt.Printf("\nChart: %s\n", *chartPath)
	}
	return nil
}

// cpu formats a result's CPU time per call: this process + the servers.
func cpu(r run.Result) string {
	return fmt.Sprintf("%s + %s", r.CPU.Round(100*time.Nanosecond), r.ServerCPU.Round(100*time.Nanosecond))
}

// twoStatements is the alternative to the library's one-statement denial
// that was measured: the refusing upsert alone, which returns no row when
// it refuses, followed by a read of the counter (state.sql).
const twoStatements = `INSERT INTO racefree_quotas AS q (tenant, scope, key, kind, tat, used, updated_at, expires_at)
SELECT $1, $2, $3, 'gcra', now + $4::bigint * $5::bigint, 0, now, now + $4::bigint * $5::bigint
FROM (SELECT COALESCE($7::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
ON CONFLICT (tenant, scope, key, kind) DO UPDATE SET
  tat        = GREATEST(q.tat, excluded.updated_at) + $4::bigint * $5::bigint,
  updated_at = excluded.updated_at,
  expires_at = GREATEST(q.tat, excluded.updated_at) + $4::bigint * $5::bigint
WHERE GREATEST(q.tat, excluded.updated_at) + $4::bigint * $5::bigint <= excluded.updated_at + $6::bigint * $5::bigint
RETURNING tat, used, updated_at`

// readQuery reads one of the quota package's statements, from the
// repository that holds the working directory.
func readQuery(engine, name string) ([]byte, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "quota", "sql", engine, name+".sql"))
		if err == nil || !os.IsNotExist(err) || filepath.Dir(dir) == dir {
			return b, err
		}
		dir = filepath.Dir(dir)
	}
}

// keyFunc returns the key client c charges on its i-th call: its own key
// per call (distinct), or one key for all.
func cellKeys(hot bool) string {
	if hot {
		return "one hot key"
	}
	return "distinct"
}

func keyFunc(prefix string, hot bool) func(c, i int) string {
	if hot {
		k := prefix + "-hot"
		return func(int, int) string { return k }
	}
	return func(c, i int) string { return fmt.Sprintf("%s-%d-%d", prefix, c, i) }
}
