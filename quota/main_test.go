package quota_test

import (
	"bufio"
	"context"
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
	"github.com/racefree/racefree/quota"
	"go.uber.org/goleak"
)

// TestMain runs the tests, or, in a child started by consumeInProcesses,
// one round of charges.
func TestMain(m *testing.M) {
	if os.Getenv("RACEFREE_QUOTA_CHILD") == "1" {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// hotLimit is the policy of the processes' key: 50 units, no refill to
// speak of within the test.
var hotLimit = quota.Policy{Kind: quota.GCRA, Rate: 1, Per: time.Hour, Burst: 50, Wait: 2 * time.Minute}

// child opens the database named by RF_DSN with a clock fixed at RF_NOW and
// has RF_N goroutines charge one unit of RF_KEY, printing "allowed" or
// "denied" for each.
func child() error {
	now, _ := strconv.ParseInt(os.Getenv("RF_NOW"), 10, 64)
	n, _ := strconv.Atoi(os.Getenv("RF_N"))
	ctx := context.Background()
	db, err := dsn.Open(ctx, os.Getenv("RF_DSN"), &racefree.Config{Clock: racefree.NewManualClock(racefree.FromMillis(now))})
	if err != nil {
		return err
	}
	defer db.Close()
	l, err := quota.New(db, nil)
	if err != nil {
		return err
	}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		out      = bufio.NewWriter(os.Stdout)
		firstErr error
	)
	defer out.Flush()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := l.Consume(ctx, db, os.Getenv("RF_KEY"), 1, hotLimit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				firstErr = err
			case d.Allowed:
				fmt.Fprintln(out, "allowed")
			default:
				fmt.Fprintln(out, "denied")
			}
		}()
	}
	wg.Wait()
	return firstErr
}

func TestConsumeAcrossProcessesAdmitsExactlyTheLimit(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		testdb.Open(t, d, nil) // migrate once, before the processes start
		const procs, perProc = 4, 50
		outs := testdb.Processes(t, procs, func(int) []string {
			return []string{"RACEFREE_QUOTA_CHILD=1", "RF_DSN=" + d, "RF_KEY=hot",
				"RF_NOW=" + strconv.FormatInt(racefree.Millis(t0), 10), "RF_N=" + strconv.Itoa(perProc)}
		})
		allowed, denied := 0, 0
		for _, o := range outs {
			allowed += strings.Count(o, "allowed\n")
			denied += strings.Count(o, "denied\n")
		}
		if allowed != 50 || denied != 150 {
			t.Fatalf("%d allowed and %d denied of %d charges in %d processes; want 50 and 150", allowed, denied, procs*perProc, procs)
		}
	})
}
