package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/conformance"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestManyInstancesOnOnePostgres runs 4 racefree serve processes on one
// PostgreSQL database behind a round-robin client: the history of claim
// acquires and releases across them is linearizable, and one
// Idempotency-Key sent to every instance at once runs once.
func TestManyInstancesOnOnePostgres(t *testing.T) {
	t.Parallel()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	first := startServe(t, dsn) // migrates; the others find the schema current
	ins := []*instance{first}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := startServe(t, dsn)
			mu.Lock()
			ins = append(ins, in)
			mu.Unlock()
		}()
	}
	wg.Wait()
	var next atomic.Int64
	pick := func() *instance { return ins[next.Add(1)%int64(len(ins))] }
	ctx := context.Background()

	workers, rounds := 6, testdb.Scale(25, 400)
	var history []porcupine.Operation
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One holder per worker: a holder whose acquire races its own
			// release can find the released tenure extended (the
			// acquire's clock is read before it waits for the release's
			// row lock), which a shared holder would report here.
			holder := "h" + strconv.Itoa(w)
			var fence int64
			for range rounds {
				in := conformance.LeaseInput{Op: "acquire", Holder: holder}
				if rand.IntN(2) == 0 {
					in = conformance.LeaseInput{Op: "release", Holder: holder, Fence: max(1, fence-int64(rand.IntN(2)))}
				}
				call0 := time.Since(start).Nanoseconds()
				var a answer
				if in.Op == "acquire" {
					a = call(ctx, "POST", pick().url("/v1/claims/lin"), fmt.Sprintf(`{"holder":%q,"ttl_ms":600000}`, holder))
				} else {
					a = call(ctx, "DELETE", pick().url(fmt.Sprintf("/v1/claims/lin?holder=%s&fence=%d", holder, in.Fence)), "")
				}
				ret := time.Since(start).Nanoseconds()
				out := conformance.LeaseOutput{OK: a.code/100 == 2, Err: a.problem(), Fence: a.int("fence")}
				out.Holder, _ = a.body["holder"].(string)
				if a.code != 200 && a.code != 204 && a.code != 409 {
					t.Errorf("%+v: %d %v %v", in, a.code, a.body, a.err)
					return
				}
				if in.Op == "acquire" && out.OK {
					fence = out.Fence
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: w, Input: in, Call: call0, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if res := porcupine.CheckOperationsTimeout(conformance.LeaseModel, history, 30*time.Second); res != porcupine.Ok {
		t.Fatalf("the claim history across %d instances is not linearizable (%v): %d operations", len(ins), res, len(history))
	}

	// One key, sent to every instance at once: every answer is the one
	// run's, and the counter moved once.
	answers := make([]answer, 2*len(ins))
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = settle(t, "POST", ins[i%len(ins)].url("/v1/sequences/acme/invoice/next"), `{"n":1}`, "once")
		}()
	}
	wg.Wait()
	for i, a := range answers {
		if a.code != 200 || a.int("first") != 1 {
			t.Errorf("answer %d from instance %d: %d %v; want number 1", i, i%len(ins), a.code, a.body)
		}
	}
	if a := settle(t, "POST", pick().url("/v1/sequences/acme/invoice/next"), `{"n":1}`, "twice"); a.int("first") != 2 {
		t.Errorf("next number after the key ran: %d %v; want 2", a.code, a.body)
	}
	t.Logf("%d claim operations across %d instances linearizable", len(history), len(ins))
}
