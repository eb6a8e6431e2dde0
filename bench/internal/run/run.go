// Package run holds what the benchmark commands share: the databases they
// run on (a SQLite file, and a fresh PostgreSQL schema on the server named
// by TEST_DATABASE_URL) and the runner that times a cell's sides
// alternately, slice by slice, from many client goroutines.
package run

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

	_ "github.com/jackc/pgx/v5/stdlib" // the admin connection that creates schemas
	"github.com/racefree/racefree"
)

// Main parses the command line, sets *cell to 200 ms when *short is set,
// and runs f: on its error it prints "bench: " and the error on stderr
// and exits with status 1.
func Main(short *bool, cell *time.Duration, f func() error) {
	flag.Parse()
	if *short {
		*cell = 200 * time.Millisecond
	}
	if err := f(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// Engine is one database a command runs on: the engine's name and the
// DSN to open (sqlite:PATH, or postgres://… with a search_path).
type Engine struct {
	Name string
	DSN  string
}

// Engines returns the databases to run on: a SQLite file in a temporary
// directory, then, when TEST_DATABASE_URL is set, a fresh schema on that
// server. Without it, note says that PostgreSQL is left out. cleanup
// drops the schema and removes the directory; it is set whenever err is
// nil.
func Engines(ctx context.Context) (engines []Engine, note string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "racefree-bench")
	if err != nil {
		return nil, "", nil, err
	}
	engines = []Engine{{racefree.SQLite, "sqlite:" + filepath.Join(dir, "bench.db")}}
	u := os.Getenv("TEST_DATABASE_URL")
	if u == "" {
		return engines, "PostgreSQL left out: TEST_DATABASE_URL is not set.", func() { os.RemoveAll(dir) }, nil
	}
	schemaURL, drop, err := NewSchema(ctx, u)
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	engines = append(engines, Engine{racefree.Postgres, schemaURL})
	return engines, "", func() { drop(); os.RemoveAll(dir) }, nil
}

// NewSchema makes a fresh schema, rf_bench_ and 16 random hex digits, on
// the PostgreSQL server at base, and returns base with that schema as its
// search_path, and a function that drops the schema.
func NewSchema(ctx context.Context, base string) (string, func(), error) {
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
	pgMu.Lock()
	pgAdmin = admin
	pgMu.Unlock()
	drop := func() {
		pgMu.Lock()
		if pgAdmin == admin {
			pgAdmin = nil
		}
		pgMu.Unlock()
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
	q.Set("application_name", benchAppName) // its backends' CPU time is the server's (cpu.go)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}

// PrintNotes prints each note after a blank line.
func PrintNotes(notes []string) {
	for _, n := range notes {
		fmt.Println()
		fmt.Println(n)
	}
}

// Op is one call of a side of a cell: client is the goroutine's number,
// i the call's number in that goroutine (fresh in each slice).
type Op func(ctx context.Context, client, i int) error

// Result is one side of a cell: calls per second, the p99 latency of one
// call, and the CPU time one call cost: in this process (the clients and
// racefree, and SQLite, which runs inside it) and in the server processes
// (PostgreSQL's, Redis's), user and system time as the kernel counts it.
// CPU time is far steadier than a rate on a shared machine, but the
// server's figure counts every process of that server: run on a quiet one.
type Result struct {
	Rate      float64
	P99       time.Duration
	CPU       time.Duration // per call, this process
	ServerCPU time.Duration // per call, the servers' processes
}

func (r Result) String() string {
	return fmt.Sprintf("%.0f/s (p99 %s, cpu %s+%s)", r.Rate, r.P99.Round(10*time.Microsecond),
		r.CPU.Round(100*time.Nanosecond), r.ServerCPU.Round(100*time.Nanosecond))
}

// Rounds is how many slices each cell's time is cut into: the sides of a
// comparison run alternately, slice by slice, in turn first, so that the
// load of a shared machine falls on both alike.
const Rounds = 4

// Alternately runs the ops alternately, each for d in all, from clients
// goroutines, and returns each one's result. Each slice adds 1,000,000 to
// i, so that a key made from client and i is fresh in every slice.
func Alternately(ctx context.Context, clients int, d time.Duration, ops ...Op) []Result {
	out := make([]Result, len(ops))
	n, t := make([]float64, len(ops)), make([]float64, len(ops))
	lat := make([][]time.Duration, len(ops))
	cpu := make([]cpuSpent, len(ops))
	slice := d / Rounds
	for r := range Rounds {
		off := r * 1_000_000 // fresh keys in each round
		for j := range ops {
			k := j
			if r%2 == 1 { // every other round in reverse: neither side always goes first
				k = len(ops) - 1 - j
			}
			f := ops[k]
			c, s, l, u := run1(ctx, clients, slice, func(ctx context.Context, c, i int) error { return f(ctx, c, i+off) })
			n[k], t[k] = n[k]+c, t[k]+s
			lat[k] = append(lat[k], l...)
			cpu[k] = cpu[k].add(u)
		}
	}
	for k := range ops {
		out[k] = result(n[k], t[k], lat[k], cpu[k])
	}
	return out
}

// For runs f from clients goroutines for d, in one go, and returns its
// result.
func For(ctx context.Context, clients int, d time.Duration, f Op) Result {
	return result(run1(ctx, clients, d, f))
}

func result(calls, seconds float64, lat []time.Duration, cpu cpuSpent) Result {
	r := Result{Rate: calls / seconds}
	if calls > 0 {
		r.CPU = time.Duration(float64(cpu.self) / calls)
		r.ServerCPU = time.Duration(float64(cpu.servers) / calls)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		r.P99 = lat[len(lat)*99/100]
	}
	return r
}

// run1 runs f from clients goroutines for d and returns the calls made,
// the seconds taken, each call's latency and the CPU time spent. It stops
// at the first error, which it prints on stderr.
func run1(ctx context.Context, clients int, d time.Duration, f Op) (float64, float64, []time.Duration, cpuSpent) {
	var (
		n    atomic.Int64
		wg   sync.WaitGroup
		stop atomic.Bool
		once sync.Once
		mu   sync.Mutex
		all  []time.Duration
	)
	cpu0 := cpuNow()
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
	took := time.Since(start).Seconds()
	return float64(n.Load()), took, all, cpuNow().since(cpu0)
}
