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
//	go run ./claims -engines sqlite -clients 64 -http-only -chart ''   # one engine's HTTP row at 64 clients
//	go run ./claims -engines sqlite -clients 64 -http-only -chart '' -cpuprofile http.pprof
//	go tool pprof -tagfocus cell=sqlite-on-server -top http.pprof   # the server's side of the combiner's HTTP cell
//
// -engines and -clients choose the cells (comma-separated; defaults: both
// engines, 1, 16 and 64 clients), -http-only runs only the "…, HTTP" rows
// (no Go API cells, bare statements or redislock), and -cpuprofile writes
// a CPU profile of the HTTP cells, whose samples carry the label cell:
// ENGINE-SIDE-ROLE, SIDE off or on (the combiner), ROLE server (the
// HTTP server's connection goroutines and what they start) or client.
// After the table, a note says what the combiner's batches held in each
// cell of more than one client (calls a batch, the share through a
// statement over arrays, the queue wait), and another compares each HTTP
// cell with the Go API's cell of the same engine and clients (when both
// ran): its rate and its CPU time per pair.
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
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/bench/internal/bare"
	"github.com/racefree/racefree/bench/internal/chart"
	"github.com/racefree/racefree/bench/internal/run"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dsn"
	"github.com/redis/go-redis/v9"
)

var (
	short     = flag.Bool("short", false, "run each cell for 200 ms")
	cellTime  = flag.Duration("time", 3*time.Second, "how long each cell runs")
	redisAddr = flag.String("redis", "127.0.0.1:6379", "Redis address for redislock")
	chartPath = flag.String("chart", "claims.png", "write the figures as a PNG chart to this file (empty: none)")
	engineSet = flag.String("engines", "sqlite,postgres", "the engines to run on, comma-separated")
	clientSet = flag.String("clients", "1,16,64", "the cells' numbers of concurrent clients, comma-separated")
	httpOnly  = flag.Bool("http-only", false, "run only the HTTP rows: no Go API cells, bare statements or redislock")
	cpuProf   = flag.String("cpuprofile", "", "write a CPU profile of the HTTP cells to this file (samples labelled cell=ENGINE-SIDE-ROLE)")
)

const ttl = time.Minute

// clients are the cells' numbers of concurrent callers (-clients).
var clients []int

func main() { run.Main(short, cellTime, bench) }

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

// parseSets reads -engines and -clients.
func parseSets() (map[string]bool, error) {
	engines := map[string]bool{}
	for _, e := range strings.Split(*engineSet, ",") {
		if e = strings.TrimSpace(e); e != racefree.SQLite && e != racefree.Postgres {
			return nil, fmt.Errorf("-engines: %q is not sqlite or postgres", e)
		}
		engines[e] = true
	}
	clients = nil
	for _, c := range strings.Split(*clientSet, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-clients: %q is not a positive number", c)
		}
		clients = append(clients, n)
	}
	return engines, nil
}

func bench() error {
	ctx := context.Background()
	var (
		notes  []string
		panels []chart.Panel
	)
	want, err := parseSets()
	if err != nil {
		return err
	}
	all, note, cleanup, err := run.Engines(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	var engines []run.Engine
	for _, e := range all {
		if want[e.Name] {
			engines = append(engines, e)
		}
	}
	if note != "" && want[racefree.Postgres] {
		notes = append(notes, note)
	}
	for _, e := range engines {
		if e.Name == racefree.Postgres {
			if n, err := run.AutovacuumNote(ctx, e.DSN); err != nil {
				return err
			} else if n != "" {
				notes = append(notes, n)
			}
		}
	}
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: 64})
	defer rdb.Close()
	redisCells := map[int]run.Result{}
	if *httpOnly {
		// No redislock cells: its columns stay empty.
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
		warmBare, err := bare.Pair(ctx, off, "warm-bare", ttl)
		if err != nil {
			off.Close()
			on.Close()
			return err
		}
		run.Alternately(ctx, 16, 500*time.Millisecond, pair(off, "warm-off"), pair(on, "warm-on"), warmBare)
		goCells := map[int][]run.Result{}
		if !*httpOnly {
			goAPI := panel(e.Name + ", Go API")
			for _, n := range clients {
				if err := freshStatistics(ctx, off); err != nil {
					off.Close()
					on.Close()
					return err
				}
				cell := fmt.Sprintf("%d-%d", n, time.Now().UnixNano())
				b, _ := bare.Pair(ctx, off, "bare-"+cell, ttl)
				before := on.CombineStats()
				r := run.Alternately(ctx, n, *cellTime, pair(off, "off-"+cell), pair(on, "on-"+cell), b)
				row(e.Name, n, r, redisCells, &goAPI)
				goCells[n] = r
				if note := batchNote(e.Name+", Go API", n, before, on.CombineStats()); note != "" {
					notes = append(notes, note)
				}
			}
			panels = append(panels, goAPI)
		}
		http, httpCells, err := overHTTP(ctx, e.Name, off, on, redisCells, &notes)
		if err != nil {
			off.Close()
			on.Close()
			return err
		}
		panels = append(panels, http)
		for _, n := range clients {
			if g, ok := goCells[n]; ok {
				h := httpCells[n]
				notes = append(notes, fmt.Sprintf("%s, %d clients, HTTP / Go API: rate %.2f× off, %.2f× combiner; CPU per pair %s vs %s off, %s vs %s combiner.",
					e.Name, n, h[0].Rate/g[0].Rate, h[1].Rate/g[1].Rate,
					cpuOf(h[0]), cpuOf(g[0]), cpuOf(h[1]), cpuOf(g[1])))
			}
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

// freshStatistics analyzes the claims tables on PostgreSQL before a
// cell (run.FreshStatistics).
func freshStatistics(ctx context.Context, db *racefree.DB) error {
	return run.FreshStatistics(ctx, db, "racefree_claims", "racefree_claim_floors", "bench_bare_claims")
}

// batchNote says what the combiner's batches held in one cell: calls a
// batch on average, the share that ran through a statement over arrays,
// and the mean queue wait, from the stats before and after it.
func batchNote(cell string, clients int, before, after racefree.CombineStats) string {
	n := after.Batches - before.Batches
	if n == 0 || clients == 1 {
		return ""
	}
	ops := after.Ops - before.Ops
	return fmt.Sprintf("%s, %d clients: the combiner's batches held %.1f calls on average, %.0f%% of them through a statement over arrays, mean queue wait %s.",
		cell, clients, float64(ops)/float64(n), 100*float64(after.Many-before.Many)/float64(max(ops, 1)),
		((after.QueueWait - before.QueueWait) / time.Duration(max(ops, 1))).Round(time.Microsecond))
}

// cpuOf is the CPU time of one call of r, this process's and the
// servers' together.
func cpuOf(r run.Result) time.Duration { return (r.CPU + r.ServerCPU).Round(100 * time.Nanosecond) }

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
