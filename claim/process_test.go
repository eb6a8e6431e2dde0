package claim_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
	"go.uber.org/goleak"
)

// TestMain runs the tests, or, in a child started by acquireInProcesses,
// one round of acquisitions.
func TestMain(m *testing.M) {
	if os.Getenv("RACEFREE_CLAIM_CHILD") == "1" {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// child opens the database named by RF_DSN with a clock fixed at RF_NOW and
// has RF_N goroutines acquire RF_KEY, printing "won HOLDER FENCE" or "lost".
func child() error {
	now, _ := strconv.ParseInt(os.Getenv("RF_NOW"), 10, 64)
	n, _ := strconv.Atoi(os.Getenv("RF_N"))
	ctx := context.Background()
	db, err := dsn.Open(ctx, os.Getenv("RF_DSN"), &racefree.Config{Clock: racefree.NewManualClock(racefree.FromMillis(now))})
	if err != nil {
		return err
	}
	defer db.Close()
	claims := claim.New(db)
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = bufio.NewWriter(os.Stdout)
	)
	defer out.Flush()
	var firstErr error
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("%s-w%d", os.Getenv("RF_TAG"), i)
			c, err := claims.Acquire(ctx, db, os.Getenv("RF_KEY"), holder, time.Minute)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				fmt.Fprintf(out, "won %s %d\n", c.Holder, c.Fence)
			case errors.Is(err, racefree.ErrHeld):
				fmt.Fprintln(out, "lost")
			default:
				firstErr = err
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// acquireInProcesses starts procs processes of perProc goroutines each, all
// acquiring key with the clock at now, and returns the winners' lines.
func acquireInProcesses(t *testing.T, d, key string, now time.Time, procs, perProc int) (won []string, lost int) {
	t.Helper()
	outs := testdb.Processes(t, procs, func(p int) []string {
		return []string{"RACEFREE_CLAIM_CHILD=1", "RF_DSN=" + d, "RF_KEY=" + key,
			"RF_NOW=" + strconv.FormatInt(racefree.Millis(now), 10), "RF_N=" + strconv.Itoa(perProc), fmt.Sprintf("RF_TAG=%d-%d", now.Unix(), p)}
	})
	for _, o := range outs {
		for _, line := range strings.Split(strings.TrimSpace(o), "\n") {
			switch {
			case strings.HasPrefix(line, "won "):
				won = append(won, line)
			case line == "lost":
				lost++
			}
		}
	}
	return won, lost
}

func TestExactlyOneWinnerAcrossProcesses(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		testdb.Open(t, d, nil) // migrate once, before the processes start
		const procs, perProc = 4, 16
		for round, at := range []time.Time{t0, t0.Add(time.Minute)} {
			won, lost := acquireInProcesses(t, d, "job", at, procs, perProc)
			if len(won) != 1 || lost != procs*perProc-1 {
				t.Fatalf("round %d: winners %q and %d losers; want 1 and %d", round+1, won, lost, procs*perProc-1)
			}
			if fence := strings.Fields(won[0])[2]; fence != strconv.Itoa(round+1) {
				t.Fatalf("round %d: fence %s, want %d", round+1, fence, round+1)
			}
		}
	})
}
