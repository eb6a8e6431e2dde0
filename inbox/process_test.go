package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// childEnv, when set to a DSN, makes the test binary a delivering process
// instead of running the tests.
const childEnv = "RACEFREE_TEST_INBOX_CHILD"

const childEvents = 30

// childMain delivers every event ID once, in an order of its own, through
// an Inbox of its own, and exits 0 when every delivery was acknowledged.
func childMain(d string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := dsn.Open(ctx, d, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	in, err := inbox.New(db, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	q := `INSERT INTO effects (event_id) VALUES (?)`
	if db.Engine() == racefree.Postgres {
		q = `INSERT INTO effects (event_id) VALUES ($1)`
	}
	start := os.Getpid() % childEvents
	for i := range childEvents {
		id := fmt.Sprintf("evt_%02d", (start+i)%childEvents)
		for attempt := 0; ; attempt++ {
			_, err := in.Receive(ctx, "s", id, nil, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, q, id)
				return err
			})
			if err == nil {
				break
			}
			if attempt > 20 {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	return 0
}

// TestProcessesDeliverEachEventOnce runs four processes that each deliver
// the same 30 events to one database.
func TestProcessesDeliverEachEventOnce(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		b := setup(t, testdb.Open(t, d, nil), nil)
		const procs = 4
		testdb.Processes(t, procs, func(int) []string { return []string{childEnv + "=" + d} })
		got := b.effects(t)
		if len(got) != childEvents {
			t.Fatalf("%d events processed, want %d", len(got), childEvents)
		}
		for id, n := range got {
			if n != 1 {
				t.Errorf("%s processed %d times by %d processes, want once", id, n, procs)
			}
		}
	})
}
