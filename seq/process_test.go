package seq_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
	"go.uber.org/goleak"
)

// TestMain runs the tests, or, in a child started by nextInProcesses, one
// process's share of the calls.
func TestMain(m *testing.M) {
	if os.Getenv("RACEFREE_SEQ_CHILD") == "1" {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// child opens the database named by RF_DSN and has RF_N goroutines call
// NextN RF_ROUNDS times each on one counter, half in transactions of their
// own, printing "got FIRST N" per call.
func child() error {
	workers, _ := strconv.Atoi(os.Getenv("RF_N"))
	rounds, _ := strconv.Atoi(os.Getenv("RF_ROUNDS"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a deadlock fails, never hangs
	defer cancel()
	db, err := dsn.Open(ctx, os.Getenv("RF_DSN"), &racefree.Config{TxAttempts: 100})
	if err != nil {
		return err
	}
	defer db.Close()
	c := seq.New(db)
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		out      = bufio.NewWriter(os.Stdout)
		firstErr error
	)
	defer out.Flush()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				n := int64(1 + (w+r)%2)
				var first int64
				var err error
				if w%2 == 0 {
					err = db.InTx(ctx, func(tx *sql.Tx) error {
						first, err = c.NextN(ctx, tx, "acme", "invoice", n)
						return err
					})
				} else {
					first, err = c.NextN(ctx, db, "acme", "invoice", n)
				}
				mu.Lock()
				if err != nil {
					firstErr = err
				} else {
					fmt.Fprintf(out, "got %d %d\n", first, n)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// TestGaplessAcrossProcesses: 4 processes of 16 goroutines each on one
// counter: the numbers are exactly 1..N, no gap, no duplicate.
func TestGaplessAcrossProcesses(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db := testdb.Open(t, d, nil) // migrate once, before the processes start
		const procs, perProc, rounds = 4, 16, 4
		outs := testdb.Processes(t, procs, func(int) []string {
			return []string{"RACEFREE_SEQ_CHILD=1", "RF_DSN=" + d, "RF_N=" + strconv.Itoa(perProc), "RF_ROUNDS=" + strconv.Itoa(rounds)}
		})
		var got [][2]int64
		for _, o := range outs {
			for _, line := range strings.Split(strings.TrimSpace(o), "\n") {
				var first, n int64
				if _, err := fmt.Sscanf(line, "got %d %d", &first, &n); err != nil {
					t.Fatalf("child line %q: %v", line, err)
				}
				got = append(got, [2]int64{first, n})
			}
		}
		if len(got) != procs*perProc*rounds {
			t.Fatalf("%d calls reported; want %d", len(got), procs*perProc*rounds)
		}
		total := checkGapless(t, got)
		if cur, err := seq.New(db).Current(context.Background(), db, "acme", "invoice"); err != nil || cur != total {
			t.Fatalf("Current = %d, %v; want %d", cur, err, total)
		}
	})
}
