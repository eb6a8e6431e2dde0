package reliability

import (
	"sync"
	"testing"

	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestThroughATransactionPooler serves a database through PgBouncer in
// transaction mode, as the README says it works: the load of every
// primitive, from two racefree instances sharing the pooler, keeps every
// acknowledged write and every invariant, and one Idempotency-Key sent to
// both runs once. Nothing depends on session state.
func TestThroughATransactionPooler(t *testing.T) {
	t.Parallel()
	dsn := testdb.PgBouncer(t, 20)
	keys := auditKeyring(t) // the instances share their keyring, as they must
	first := startServe(t, dsn, "--inbox-secret", "billing="+webhookSecret, keys, "--relay-listen=false")
	second := startServe(t, dsn, "--inbox-secret", "billing="+webhookSecret, keys, "--relay-listen=false")
	l := newLedger()
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := first
			if c%2 == 1 {
				in = second
			}
			for i := range testdb.Scale(28, 700) {
				load(t, in, l, c, i)
			}
		}()
	}
	wg.Wait()
	answers := make([]answer, 4)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := first
			if i%2 == 1 {
				in = second
			}
			answers[i] = settle(t, "POST", in.url("/v1/sequences/other/n/next"), `{"n":1}`, "pooled-once")
		}()
	}
	wg.Wait()
	for i, a := range answers {
		if a.code != 200 || a.int("first") != 1 {
			t.Errorf("answer %d: %d %v; want number 1 from the one run", i, a.code, a.body)
		}
	}
	t.Logf("%d operations through PgBouncer in transaction mode", l.ops)
	checkLedger(t, first, dsn, l)
}
