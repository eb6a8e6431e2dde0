// Command outbox measures racefree's outbox end to end beside River
// (github.com/riverqueue/river) on the same machine and engine: producers
// insert the same number of messages (jobs), each in a caller's
// transaction, while the relay (the River client) works them with a no-op
// handler; a round ends when the database says every one is delivered
// (completed). It also measures the latency of one Enqueue (InsertTx)
// inside a caller's transaction. It prints a Markdown table.
//
//	go run ./outbox                       # 3 rounds of 5000 on each engine
//	go run ./outbox -n 20000 -rounds 5
//
// The two sides alternate round by round, so that a shared machine's load
// falls on both alike; each figure is the median of the rounds.
// PostgreSQL comes from TEST_DATABASE_URL (a schema of its own per round,
// dropped at the end); without it only SQLite runs.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/bench/internal/run"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/outbox"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite"
)

var (
	n         = flag.Int("n", 5000, "messages (jobs) per round")
	rounds    = flag.Int("rounds", 3, "rounds per side and engine")
	perTx     = flag.Int("tx", 1, "messages per producer transaction")
	producers = flag.Int("producers", 4, "producer goroutines")
	workers   = flag.Int("workers", 32, "handlers at once (racefree Concurrency, River MaxWorkers)")
	latencyN  = flag.Int("latency", 1000, "enqueues timed for the latency figures")
	engines   = flag.String("engines", "sqlite,postgres", "engines to run")
	noNotify  = flag.Bool("no-notify", false, "racefree: no NOTIFY at Enqueue (relays poll every -poll)")
	listen    = flag.Bool("listen", true, "racefree on PostgreSQL: the relay LISTENs")
	poll      = flag.Duration("poll", 0, "racefree: the relay's PollInterval (0: the default, 1s)")
	prefill   = flag.Bool("prefill", false, "insert every message first, then time only the relay (the River client) working them off")
	sides     = flag.String("sides", "racefree,river,river-fast", "sides to run: racefree, river (River's defaults), river-fast (River with a 1 ms FetchCooldown)")
)

func main() {
	flag.Parse()
	if err := bench(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type result struct {
	perSec   []float64
	p50, p99 time.Duration
}

func bench() error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "racefree-outbox-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pgURL := os.Getenv("TEST_DATABASE_URL")
	var notes []string
	results := map[string]map[string]*result{} // engine -> side
	for _, engine := range strings.Split(*engines, ",") {
		if engine == racefree.Postgres && pgURL == "" {
			notes = append(notes, "PostgreSQL left out: TEST_DATABASE_URL is not set")
			continue
		}
		results[engine] = map[string]*result{}
		for _, side := range strings.Split(*sides, ",") {
			results[engine][side] = &result{}
		}
		for round := range *rounds {
			for _, side := range strings.Split(*sides, ",") {
				env, err := newEnv(ctx, engine, dir, pgURL)
				if err != nil {
					return err
				}
				var d time.Duration
				switch side {
				case "racefree":
					d, err = racefreeRound(ctx, env)
				case "river", "river-fast":
					d, err = riverRound(ctx, env, side == "river-fast")
				default:
					err = fmt.Errorf("unknown side %q", side)
				}
				env.close()
				if err != nil {
					return fmt.Errorf("%s %s round %d: %w", engine, side, round+1, err)
				}
				rate := float64(*n) / d.Seconds()
				results[engine][side].perSec = append(results[engine][side].perSec, rate)
				fmt.Fprintf(os.Stderr, "%s %s round %d: %d in %s, %.0f/s\n", engine, side, round+1, *n, d.Round(time.Millisecond), rate)
			}
		}
		for _, side := range strings.Split(*sides, ",") {
			if side == "river-fast" {
				continue // the same InsertTx as "river"
			}
			env, err := newEnv(ctx, engine, dir, pgURL)
			if err != nil {
				return err
			}
			lat, err := latency(ctx, env, side)
			env.close()
			if err != nil {
				return fmt.Errorf("%s %s latency: %w", engine, side, err)
			}
			r := results[engine][side]
			r.p50, r.p99 = percentile(lat, 50), percentile(lat, 99)
		}
	}
	mode := "inserted and worked at once"
	if *prefill {
		mode = "inserted first, then worked off (only the working is timed)"
	}
	fmt.Printf("%d messages a round, %s; %d producers, %d per transaction, %d handlers; median of %d rounds\n\n", *n, mode, *producers, *perTx, *workers, *rounds)
	fmt.Println("| engine | racefree msg/s | River jobs/s (defaults) | River jobs/s (1 ms FetchCooldown) | racefree ÷ River (defaults / fast) | racefree Enqueue p50 / p99 | River InsertTx p50 / p99 |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, engine := range strings.Split(*engines, ",") {
		rs, ok := results[engine]
		if !ok {
			continue
		}
		rate := func(r *result) float64 {
			if r == nil || len(r.perSec) == 0 {
				return 0
			}
			return median(r.perSec)
		}
		cell := func(r *result) string {
			if rate(r) == 0 {
				return "—"
			}
			return fmt.Sprintf("%.0f", rate(r))
		}
		ratio := func(a, b *result) string {
			if rate(a) == 0 || rate(b) == 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f×", rate(a)/rate(b))
		}
		lat := func(r *result) string {
			if r == nil || r.p50 == 0 {
				return "—"
			}
			return fmt.Sprintf("%s / %s", r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond))
		}
		rf, rv, rfast := rs["racefree"], rs["river"], rs["river-fast"]
		fmt.Printf("| %s | %s | %s | %s | %s / %s | %s | %s |\n", engine, cell(rf), cell(rv), cell(rfast), ratio(rf, rv), ratio(rf, rfast), lat(rf), lat(rv))
	}
	for _, note := range notes {
		fmt.Println("\n" + note)
	}
	return nil
}

// env is one fresh database: a SQLite file, or a PostgreSQL schema.
type env struct {
	engine string
	dsn    string // racefree's DSN (sqlite:PATH or postgres://…?search_path=…)
	path   string // the SQLite file
	pgURL  string // the PostgreSQL URL with search_path
	close  func()
}

func newEnv(ctx context.Context, engine, dir, base string) (*env, error) {
	if engine == racefree.SQLite {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		name := "rf_bench_" + hex.EncodeToString(b)
		p := filepath.Join(dir, name+".db")
		return &env{engine: engine, dsn: "sqlite:" + p, path: p, close: func() {
			for _, suffix := range []string{"", "-wal", "-shm"} {
				_ = os.Remove(p + suffix)
			}
		}}, nil
	}
	u, drop, err := run.NewSchema(ctx, base)
	if err != nil {
		return nil, err
	}
	return &env{engine: engine, dsn: u, pgURL: u, close: drop}, nil
}

// produce runs the producers: *producers goroutines insert n messages in
// transactions of *perTx, calling insert for each.
func produce(ctx context.Context, begin func() (commit func() error, insert func(i int) error, err error)) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, *producers)
	for range *producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := int(next.Add(int64(*perTx))) - *perTx
				if start >= *n {
					return
				}
				commit, insert, err := begin()
				if err != nil {
					errs <- err
					return
				}
				for i := start; i < min(start+*perTx, *n); i++ {
					if err := insert(i); err != nil {
						errs <- err
						return
					}
				}
				if err := commit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitAll polls count until it reaches *n.
func waitAll(ctx context.Context, count func() (int64, error)) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		c, err := count()
		if err != nil {
			return err
		}
		if c >= int64(*n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d delivered after 10 minutes", c, *n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func racefreeRound(ctx context.Context, e *env) (time.Duration, error) {
	db, err := dsn.Open(ctx, e.dsn, &racefree.Config{Schema: racefree.SchemaMigrate, MaxOpenConns: 16})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	o, err := outbox.New(db, &outbox.Options{NoNotify: *noNotify})
	if err != nil {
		return 0, err
	}
	var handled atomic.Int64
	r, err := o.NewRelay(func(context.Context, *outbox.Delivery) error { handled.Add(1); return nil },
		&outbox.RelayOptions{Concurrency: *workers, Listen: *listen && e.engine == racefree.Postgres, PollInterval: *poll, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 0, err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	startRelay := func() {
		go func() { done <- r.Run(rctx) }()
	}
	defer func() { stop(); <-done }()
	producers := func() error {
		return produce(ctx, func() (func() error, func(int) error, error) {
			tx, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				return nil, nil, err
			}
			return tx.Commit, func(i int) error {
				_, err := o.Enqueue(ctx, tx, outbox.Message{Topic: "bench", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))})
				return err
			}, nil
		})
	}
	if *prefill {
		if err := producers(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	startRelay()
	if !*prefill {
		if err := producers(); err != nil {
			return 0, err
		}
	}
	// The same count as River's side: one query on the pool (the
	// benchmark's role owns the tables, so row-level security does not
	// apply to it).
	err = waitAll(ctx, func() (c int64, err error) {
		err = db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_outbox WHERE state = 'delivered'`).Scan(&c)
		return c, err
	})
	return time.Since(start), err
}

// NoopArgs is the River job of the benchmark.
type NoopArgs struct {
	N int `json:"n"`
}

// Kind names the job.
func (NoopArgs) Kind() string { return "bench" }

type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
	handled *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[NoopArgs]) error {
	w.handled.Add(1)
	return nil
}

// riverConfig is River's configuration: its defaults (a fetch at most
// every 100 ms, and every second without a notification), or, fast, a
// fetch as often as every millisecond.
func riverConfig(handled *atomic.Int64, fast bool) *river.Config {
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{handled: handled})
	c := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}},
		Workers: ws,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if fast {
		c.FetchCooldown = time.Millisecond
		c.FetchPollInterval = 50 * time.Millisecond
	}
	return c
}

func riverRound(ctx context.Context, e *env, fast bool) (time.Duration, error) {
	var handled atomic.Int64
	if e.engine == racefree.SQLite {
		db, err := sql.Open("sqlite", e.path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
		if err != nil {
			return 0, err
		}
		defer db.Close()
		db.SetMaxOpenConns(1) // riversqlite's advice: SQLite runs one operation at a time
		drv := riversqlite.New(db)
		if err := migrateRiver[*sql.Tx](ctx, drv); err != nil {
			return 0, err
		}
		client, err := river.NewClient(drv, riverConfig(&handled, fast))
		if err != nil {
			return 0, err
		}
		return riverRun(ctx, client, func() (func() error, func(int) error, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return nil, nil, err
			}
			return tx.Commit, func(i int) error {
				_, err := client.InsertTx(ctx, tx, NoopArgs{N: i}, nil)
				return err
			}, nil
		}, func() (c int64, err error) {
			err = db.QueryRowContext(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&c)
			return c, err
		})
	}
	pool, err := pgxpool.New(ctx, e.pgURL+"&pool_max_conns=16")
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	drv := riverpgxv5.New(pool)
	if err := migrateRiver[pgx.Tx](ctx, drv); err != nil {
		return 0, err
	}
	client, err := river.NewClient(drv, riverConfig(&handled, fast))
	if err != nil {
		return 0, err
	}
	return riverRun(ctx, client, func() (func() error, func(int) error, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, nil, err
		}
		return func() error { return tx.Commit(ctx) }, func(i int) error {
			_, err := client.InsertTx(ctx, tx, NoopArgs{N: i}, nil)
			return err
		}, nil
	}, func() (c int64, err error) {
		err = pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&c)
		return c, err
	})
}

func migrateRiver[TTx any](ctx context.Context, drv riverdriver.Driver[TTx]) error {
	m, err := rivermigrate.New(drv, nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

func riverRun[TTx any](ctx context.Context, client *river.Client[TTx], begin func() (func() error, func(int) error, error), completed func() (int64, error)) (time.Duration, error) {
	if *prefill {
		if err := produce(ctx, begin); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	if !*prefill {
		if err := produce(ctx, begin); err != nil {
			return 0, err
		}
	}
	err := waitAll(ctx, completed)
	return time.Since(start), err
}

// latency times *latencyN single inserts, each in a transaction of its
// own: only the insert call, not the begin or the commit.
func latency(ctx context.Context, e *env, side string) ([]time.Duration, error) {
	out := make([]time.Duration, 0, *latencyN)
	timeIt := func(begin func() (tx any, commit func() error, err error), insert func(tx any, i int) error) error {
		for i := range *latencyN {
			tx, commit, err := begin()
			if err != nil {
				return err
			}
			start := time.Now()
			if err := insert(tx, i); err != nil {
				return err
			}
			out = append(out, time.Since(start))
			if err := commit(); err != nil {
				return err
			}
		}
		return nil
	}
	switch side {
	case "racefree":
		db, err := dsn.Open(ctx, e.dsn, &racefree.Config{Schema: racefree.SchemaMigrate})
		if err != nil {
			return nil, err
		}
		defer db.Close()
		o, err := outbox.New(db, nil)
		if err != nil {
			return nil, err
		}
		return out, timeIt(func() (any, func() error, error) {
			tx, err := db.SQL().BeginTx(ctx, nil)
			if err != nil {
				return nil, nil, err
			}
			return tx, tx.Commit, nil
		}, func(tx any, i int) error {
			_, err := o.Enqueue(ctx, tx.(*sql.Tx), outbox.Message{Topic: "bench", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))})
			return err
		})
	case "river":
		var handled atomic.Int64
		const fast = false
		if e.engine == racefree.SQLite {
			db, err := sql.Open("sqlite", e.path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
			if err != nil {
				return nil, err
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			drv := riversqlite.New(db)
			if err := migrateRiver[*sql.Tx](ctx, drv); err != nil {
				return nil, err
			}
			client, err := river.NewClient(drv, riverConfig(&handled, fast))
			if err != nil {
				return nil, err
			}
			return out, timeIt(func() (any, func() error, error) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return nil, nil, err
				}
				return tx, tx.Commit, nil
			}, func(tx any, i int) error {
				_, err := client.InsertTx(ctx, tx.(*sql.Tx), NoopArgs{N: i}, nil)
				return err
			})
		}
		pool, err := pgxpool.New(ctx, e.pgURL)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		drv := riverpgxv5.New(pool)
		if err := migrateRiver[pgx.Tx](ctx, drv); err != nil {
			return nil, err
		}
		client, err := river.NewClient(drv, riverConfig(&handled, fast))
		if err != nil {
			return nil, err
		}
		return out, timeIt(func() (any, func() error, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return nil, nil, err
			}
			return tx, func() error { return tx.Commit(ctx) }, nil
		}, func(tx any, i int) error {
			_, err := client.InsertTx(ctx, tx.(pgx.Tx), NoopArgs{N: i}, nil)
			return err
		})
	}
	return nil, errors.New("unknown side " + side)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
