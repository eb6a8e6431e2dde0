// Command claims measures claim Acquire then Release on distinct keys,
// with the combiner off and on ([racefree.Config.Combine]), beside
// github.com/bsm/redislock (Obtain then Release) on a local Redis, on
// SQLite and PostgreSQL, at 1, 16 and 64 clients, through the Go API and
// through the HTTP API (rows "…, HTTP": a server on loopback, keep-alive
// clients), and prints a Markdown table of acquire+release pairs per
// second, p99 latency and ratios, and draws the same figures as a PNG
// chart (-chart, claims.png).
//
//	go run ./claims                        # 3 s a cell
//	go run ./claims -short -chart ''       # 200 ms a cell, no chart: checks that it runs
//	go run ./claims -engines sqlite -clients 16,64 -http=false -redis '' -chart ''
//	                                       # chosen cells only
//	go run ./claims -engines sqlite -clients 16 -http=false -redis '' -chart '' -combiner-only -cpuprofile cpu.out
//	                                       # the combiner's side alone, with a CPU profile of the run (warm-up included)
//
// PostgreSQL comes from TEST_DATABASE_URL (a schema of its own, dropped at
// the end), Redis from -redis (127.0.0.1:6379); a missing one is left out
// of the table with a note. The two racefree sides of a cell run
// alternately, slice by slice, so that a shared machine's load falls on
// both alike; read the ratios, not the absolute figures.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/bench/internal/chart"
	"github.com/racefree/racefree/bench/internal/run"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dsn"
	"github.com/redis/go-redis/v9"
)

var (
	short        = flag.Bool("short", false, "run each cell for 200 ms")
	cellTime     = flag.Duration("time", 3*time.Second, "how long each cell runs")
	redisAddr    = flag.String("redis", "127.0.0.1:6379", "Redis address for redislock")
	chartPath    = flag.String("chart", "claims.png", "write the figures as a PNG chart to this file (empty: none)")
	engineSet    = flag.String("engines", "sqlite,postgres", "the engines to run on, comma-separated")
	clientSet    = flag.String("clients", "1,16,64", "the cells' numbers of concurrent callers, comma-separated")
	overHTTPs    = flag.Bool("http", true, "measure through the HTTP API too (rows \"…, HTTP\")")
	combinerOnly = flag.Bool("combiner-only", false, "run only the combiner's side of each Go API cell (no ratios; for a profile of it)")
	profile      = flag.String("cpuprofile", "", "write a CPU profile of the cells to this file (empty: none)")
)

const ttl = time.Minute

// clients are the cells' numbers of concurrent callers (-clients).
var clients []int

func main() {
	run.Main(short, cellTime, func() error {
		for _, f := range strings.Split(*clientSet, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("-clients: %q is not a number of clients", f)
			}
			clients = append(clients, n)
		}
		if *profile != "" {
			f, err := os.Create(*profile)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		return bench()
	})
}

// pair is one client's Acquire then Release of a fresh key on db.
func pair(db *racefree.DB, prefix string) run.Op {
	claims := claim.New(db)
	return func(ctx context.Context, c, i int) error {
		key := fmt.Sprintf("%s-%d-%d", prefix, c, i)
		cl, err := claims.Acquire(ctx, db, key, "w", ttl)
		if err != nil {
			return err
		}
		return claims.Release(ctx, db, key, "w", cl.Fence)
	}
}

func bench() error {
	ctx := context.Background()
	var (
		notes  []string
		panels []chart.Panel
	)
	engines, note, cleanup, err := run.Engines(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	if note != "" {
		notes = append(notes, note)
	}
	engines = slices.DeleteFunc(engines, func(e run.Engine) bool { return !slices.Contains(strings.Split(*engineSet, ","), e.Name) })
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: 64})
	defer rdb.Close()
	redisCells := map[int]run.Result{}
	if *redisAddr == "" {
		notes = append(notes, "redislock left out: -redis is empty.")
	} else if err := rdb.Ping(ctx).Err(); err == nil {
		locker := redislock.New(rdb)
		for _, n := range clients {
			prefix := fmt.Sprintf("rl-%d-%d", n, time.Now().UnixNano())
			redisCells[n] = run.Alternately(ctx, n, *cellTime, func(ctx context.Context, c, i int) error {
				l, err := locker.Obtain(ctx, fmt.Sprintf("%s-%d-%d", prefix, c, i), ttl, nil)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			})[0]
		}
	} else {
		notes = append(notes, fmt.Sprintf("redislock left out: Redis at %s: %v.", *redisAddr, err))
	}

	fmt.Printf("Claim Acquire then Release on distinct keys, pairs per second (higher is better) and p99 latency of a pair, %s a cell.\n\n", *cellTime)
	fmt.Println("| engine | clients | racefree | racefree, combiner | combiner / off | two bare statements | combiner / bare | redislock | racefree / redislock (off / combiner) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, e := range engines {
		off, err := dsn.Open(ctx, e.DSN, &racefree.Config{Schema: racefree.SchemaMigrate, MaxOpenConns: 16, Combine: racefree.CombineOff})
		if err != nil {
			return err
		}
		on, err := dsn.Open(ctx, e.DSN, &racefree.Config{Schema: racefree.SchemaMigrate, MaxOpenConns: 16, Combine: racefree.CombineOn})
		if err != nil {
			off.Close()
			return err
		}
		// Warm up, then ANALYZE: on a table the planner has no statistics
		// for, PostgreSQL may plan a key's lookup through the expiry index
		// and keep that plan per connection until the table is analyzed
		// (autovacuum does so in time; README: ANALYZE after migrate up).
		// Then warm both pools alike: a side whose connections alone are
		// warm (their page caches, their prepared statements) measured up
		// to 1.7× faster than the same code on a cold pool.
		run.For(ctx, 16, 500*time.Millisecond, pair(off, "warm"))
		if _, err := off.ExecContext(ctx, "ANALYZE"); err != nil {
			off.Close()
			on.Close()
			return err
		}
		warmBare, err := bare(ctx, off, "warm-bare")
		if err != nil {
			off.Close()
			on.Close()
			return err
		}
		run.Alternately(ctx, 16, 500*time.Millisecond, pair(off, "warm-off"), pair(on, "warm-on"), warmBare)
		goAPI := panel(e.Name + ", Go API")
		for _, n := range clients {
			cell := fmt.Sprintf("%d-%d", n, time.Now().UnixNano())
			if *combinerOnly {
				// The combiner's side alone, so that a profile (-cpuprofile) is its own.
				before := on.CombineStats()
				r := run.Alternately(ctx, n, *cellTime, pair(on, "on-"+cell))
				s := on.CombineStats()
				fmt.Printf("| %s | %d | — | %s, batches of %.1f, %.0f%% of the operations by Many forms | — | — | — | — | — |\n", e.Name, n, r[0],
					float64(s.Ops-before.Ops)/float64(max(s.Batches-before.Batches, 1)), 100*float64(s.Many-before.Many)/float64(max(s.Ops-before.Ops, 1)))
				continue
			}
			b, _ := bare(ctx, off, "bare-"+cell)
			r := run.Alternately(ctx, n, *cellTime, pair(off, "off-"+cell), pair(on, "on-"+cell), b)
			row(e.Name, n, r, redisCells, &goAPI)
		}
		panels = append(panels, goAPI)
		if *overHTTPs {
			http, err := overHTTP(ctx, e.Name, off, on, redisCells)
			if err != nil {
				off.Close()
				on.Close()
				return err
			}
			panels = append(panels, http)
		}
		s := on.CombineStats()
		if s.Batches > 0 {
			notes = append(notes, fmt.Sprintf("%s combiner: %d batches of %.1f operations on average (largest %d), mean queue wait %s, %d failed batches.",
				e.Name, s.Batches, float64(s.Ops)/float64(s.Batches), s.MaxBatch, (s.QueueWait/time.Duration(max(s.Ops, 1))).Round(time.Microsecond), s.Failed))
		}
		off.Close()
		on.Close()
	}
	run.PrintNotes(notes)
	if *chartPath != "" {
		if err := chart.Write(*chartPath, "Claim Acquire + Release on distinct keys, pairs per second", "pairs/s", panels, 2); err != nil {
			return err
		}
		fmt.Printf("\nChart: %s\n", *chartPath)
	}
	return nil
}

// panel starts a chart panel for a group of rows.
func panel(title string) chart.Panel {
	p := chart.Panel{Title: title, Series: []chart.Series{{Name: "racefree"}, {Name: "racefree, combiner"}, {Name: "redislock"}, {Name: "two bare statements"}}}
	return p
}

// row prints one row of the table, the cell r of n clients (off, then the
// combiner, then, through the Go API, the two bare statements) beside
// redislock's cell, and adds it to p.
func row(name string, n int, r []run.Result, redisCells map[int]run.Result, p *chart.Panel) {
	redisCell, ratio, redisRate := "—", "—", math.NaN()
	if rl, ok := redisCells[n]; ok {
		redisCell, redisRate = rl.String(), rl.Rate
		ratio = fmt.Sprintf("%.2f× / %.2f×", r[0].Rate/rl.Rate, r[1].Rate/rl.Rate)
	}
	bareCell, bareRatio, bareRate := "—", "—", math.NaN()
	if len(r) > 2 {
		bareCell, bareRatio, bareRate = r[2].String(), fmt.Sprintf("%.2f×", r[1].Rate/r[2].Rate), r[2].Rate
	}
	fmt.Printf("| %s | %d | %s | %s | %.2f× | %s | %s | %s | %s |\n", name, n, r[0], r[1], r[1].Rate/r[0].Rate, bareCell, bareRatio, redisCell, ratio)
	p.X = append(p.X, fmt.Sprint(n))
	for i, v := range []float64{r[0].Rate, r[1].Rate, redisRate, bareRate} {
		p.Series[i].Values = append(p.Series[i].Values, v)
	}
}
