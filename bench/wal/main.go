// Command wal measures what SQLite's write-ahead log does under a steady
// load of writes from several connections: seq.Next (one commit each,
// outside the combiner) from -clients goroutines on distinct names, with
// the library's defaults, for -time. Every 500 ms it prints the size of
// the log's file, then the rate of calls, their p99 latency and the CPU
// time each cost.
//
//	go run ./wal                 # 16 clients, 6 s
//	go run ./wal -time 60s       # longer: the log's file stays near sqlite.WALLimit
//
// Without racefree's keeper (sqlite.WALLimit) SQLite never started the
// log over under such a load, and its file grew by about 110 MiB a second
// here; with it, the file stays near the limit (docs/operations.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/bench/internal/run"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/seq"
)

var (
	short    = flag.Bool("short", false, "run for 200 ms (CI)")
	cellTime = flag.Duration("time", 6*time.Second, "how long the writers run")
	clients  = flag.Int("clients", 16, "writers at once")
)

func main() { run.Main(short, cellTime, measure) }

func measure() error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "racefree-wal")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "wal.db")
	db, err := dsn.Open(ctx, "sqlite:"+path, &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		return err
	}
	defer db.Close()
	c := seq.New(db)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if fi, err := os.Stat(path + "-wal"); err == nil {
				fmt.Printf("log's file: %d MiB\n", fi.Size()>>20)
			}
		}
	}()
	r := run.For(ctx, *clients, *cellTime, func(ctx context.Context, cl, i int) error {
		_, err := c.Next(ctx, db, "bench", fmt.Sprintf("name-%d", cl))
		return err
	})
	close(stop)
	<-done
	fmt.Printf("seq.Next, %d clients: %s\n", *clients, r)
	return nil
}
