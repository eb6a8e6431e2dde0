// Command claims measures claim Acquire then Release on distinct keys,
// with the combiner off and on (racefree.Config.Combine), beside
// github.com/bsm/redislock (Obtain then Release) on a local Redis, on
// SQLite and PostgreSQL, at 1, 16 and 64 clients, and prints a Markdown
// table of acquire+release pairs per second, p99 latency and ratios.
//
//	go run ./claims            # 3 s a cell
//	go run ./claims -short     # 200 ms a cell: checks that it runs
//
// PostgreSQL comes from TEST_DATABASE_URL (a schema of its own, dropped at
// the end), Redis from -redis (127.0.0.1:6379); a missing one is left out
// of the table with a note. The two racefree sides of a cell run
// alternately, slice by slice, so that a shared machine's load falls on
// both alike; read the ratios, not the absolute figures.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dsn"
	"github.com/redis/go-redis/v9"
)

var (
	short     = flag.Bool("short", false, "run each cell for 200 ms")
	cellTime  = flag.Duration("time", 3*time.Second, "how long each cell runs")
	redisAddr = flag.String("redis", "127.0.0.1:6379", "Redis address for redislock")
)

const ttl = time.Minute

// clients are the cells' numbers of concurrent callers.
var clients = []int{1, 16, 64}

type op func(ctx context.Context, client, i int) error

// result is one side of a cell: pairs per second and the p99 latency of
// one pair.
type result struct {
	rate float64
	p99  time.Duration
}

func main() {
	flag.Parse()
	if *short {
		*cellTime = 200 * time.Millisecond
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	var notes []string
	dir, err := os.MkdirTemp("", "racefree-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	type engineDSN struct{ name, dsn string }
	engines := []engineDSN{{racefree.SQLite, "sqlite:" + filepath.Join(dir, "bench.db")}}
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		schemaURL, drop, err := newSchema(ctx, u)
		if err != nil {
			return err
		}
		defer drop()
		engines = append(engines, engineDSN{racefree.Postgres, schemaURL})
	} else {
		notes = append(notes, "PostgreSQL left out: TEST_DATABASE_URL is not set.")
	}
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: 64})
	defer rdb.Close()
	redisCells := map[int]result{}
	if err := rdb.Ping(ctx).Err(); err == nil {
		locker := redislock.New(rdb)
		for _, n := range clients {
			prefix := fmt.Sprintf("rl-%d-%d", n, time.Now().UnixNano())
			redisCells[n] = measure(ctx, n, func(ctx context.Context, c, i int) error {
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
	fmt.Println("| engine | clients | racefree | racefree, combiner | combiner / off | redislock | racefree / redislock (off / combiner) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, e := range engines {
		off, err := dsn.Open(ctx, e.dsn, &racefree.Config{Schema: racefree.SchemaMigrate, MaxOpenConns: 16})
		if err != nil {
			return err
		}
		on, err := dsn.Open(ctx, e.dsn, &racefree.Config{Schema: racefree.SchemaMigrate, MaxOpenConns: 16, Combine: true})
		if err != nil {
			off.Close()
			return err
		}
		for _, n := range clients {
			pair := func(db *racefree.DB, prefix string) op {
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
			run := fmt.Sprintf("%d-%d", n, time.Now().UnixNano())
			r := measure(ctx, n, pair(off, "off-"+run), pair(on, "on-"+run))
			redisCell, ratio := "—", "—"
			if rl, ok := redisCells[n]; ok {
				redisCell = rl.String()
				ratio = fmt.Sprintf("%.2f× / %.2f×", r[0].rate/rl.rate, r[1].rate/rl.rate)
			}
			fmt.Printf("| %s | %d | %s | %s | %.2f× | %s | %s |\n", e.name, n, r[0], r[1], r[1].rate/r[0].rate, redisCell, ratio)
		}
		s := on.CombineStats()
		if s.Batches > 0 {
			notes = append(notes, fmt.Sprintf("%s combiner: %d batches of %.1f operations on average (largest %d), mean queue wait %s, %d failed batches.",
				e.name, s.Batches, float64(s.Ops)/float64(s.Batches), s.MaxBatch, (s.QueueWait/time.Duration(max(s.Ops, 1))).Round(time.Microsecond), s.Failed))
		}
		off.Close()
		on.Close()
	}
	for _, n := range notes {
		fmt.Println()
		fmt.Println(n)
	}
	return nil
}

func (r result) String() string {
	return fmt.Sprintf("%.0f/s (p99 %s)", r.rate, r.p99.Round(10*time.Microsecond))
}

// rounds is how many slices each cell's time is cut into: the sides of a
// comparison run alternately, slice by slice, in turn first.
const rounds = 4

// measure runs the ops alternately, each for cellTime in all, from
// clients goroutines, and returns each one's result.
func measure(ctx context.Context, clients int, ops ...op) []result {
	out := make([]result, len(ops))
	n, t := make([]float64, len(ops)), make([]float64, len(ops))
	lat := make([][]time.Duration, len(ops))
	slice := *cellTime / rounds
	for r := range rounds {
		off := r * 1_000_000 // fresh keys in each round
		for j := range ops {
			k := j
			if r%2 == 1 { // every other round in reverse: neither side always goes first
				k = len(ops) - 1 - j
			}
			f := ops[k]
			c, d, l := run1(ctx, clients, slice, func(ctx context.Context, c, i int) error { return f(ctx, c, i+off) })
			n[k], t[k] = n[k]+c, t[k]+d
			lat[k] = append(lat[k], l...)
		}
	}
	for k := range ops {
		out[k].rate = n[k] / t[k]
		if len(lat[k]) > 0 {
			slices.Sort(lat[k])
			out[k].p99 = lat[k][len(lat[k])*99/100]
		}
	}
	return out
}

// run1 runs f from clients goroutines for d and returns the calls made,
// the seconds taken and each call's latency. It stops at the first error.
func run1(ctx context.Context, clients int, d time.Duration, f op) (float64, float64, []time.Duration) {
	var (
		n    atomic.Int64
		wg   sync.WaitGroup
		stop atomic.Bool
		once sync.Once
		mu   sync.Mutex
		all  []time.Duration
	)
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() { mu.Lock(); all = append(all, mine...); mu.Unlock() }()
			for i := 0; !stop.Load(); i++ {
				t := time.Now()
				if err := f(ctx, c, i); err != nil {
					once.Do(func() { fmt.Fprintln(os.Stderr, "bench:", err) })
					stop.Store(true)
					return
				}
				mine = append(mine, time.Since(t))
				n.Add(1)
			}
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return float64(n.Load()), time.Since(start).Seconds(), all
}

// newSchema makes a fresh schema on the server at base and returns its URL
// and a function that drops it.
func newSchema(ctx context.Context, base string) (string, func(), error) {
	admin, err := sql.Open("pgx", base)
	if err != nil {
		return "", nil, err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	schema := "rf_bench_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		return "", nil, err
	}
	drop := func() {
		_, _ = admin.ExecContext(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		admin.Close()
	}
	u, err := url.Parse(base)
	if err != nil {
		drop()
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}
