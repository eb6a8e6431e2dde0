package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// childEnv, when set to a DSN, makes the test binary an appending process
// instead of running the tests.
const childEnv = "RACEFREE_TEST_AUDIT_CHILD"

const childWorkers, childAppends = 16, 4

// childMain appends childWorkers × childAppends entries to the scope "one"
// from as many goroutines, and exits 0 when every append committed.
func childMain(d string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := dsn.Open(ctx, d, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	l := newLog(nil, db, ring(nil, "k1"))
	var wg sync.WaitGroup
	errs := make(chan error, childWorkers)
	for w := range childWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range childAppends {
				for attempt := 0; ; attempt++ {
					_, err := l.Append(ctx, db, "one", Entry{Actor: fmt.Sprint(os.Getpid(), "/", w), Action: "write", Data: []byte(fmt.Sprint(i))})
					if err == nil {
						break
					}
					if !errors.Is(err, racefree.ErrRetryable) || attempt > 20 {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestAppendFromProcesses: four processes of 16 goroutines each append to
// one scope; the numbers are exactly 1..N and the chain verifies.
func TestAppendFromProcesses(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db := testdb.Open(t, d, nil)
		const procs = 4
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		testdb.Processes(t, procs, func(int) []string { return []string{childEnv + "=" + d} })
		l := newLog(t, db, ring(t, "k1"))
		const n = procs * childWorkers * childAppends
		var seqs []int64
		for after := int64(0); ; {
			page, err := l.List(ctx, "one", after, MaxListLimit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			for _, r := range page {
				seqs = append(seqs, r.Seq)
			}
			after = page[len(page)-1].Seq
		}
		if len(seqs) != n {
			t.Fatalf("%d entries, want %d", len(seqs), n)
		}
		for i, s := range seqs {
			if s != int64(i+1) {
				t.Fatalf("entry %d numbered %d", i+1, s)
			}
		}
		res := verify(t, l, "one", nil)
		if res.Break != nil || res.Rows != n {
			t.Fatalf("verify: %+v", res)
		}
	})
}
