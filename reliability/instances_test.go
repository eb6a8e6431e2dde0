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
	"github.com/racefree/racefree/internal/testdb"
)

// leaseState is the model's claim: its holder and fence, and whether it
// is held (the TTL is long enough that it never lapses in the test).
type leaseState struct {
	holder string
	fence  int64
	held   bool
}

type leaseInput struct {
	op     string // acquire, release
	holder string
	fence  int64 // release's
}

type leaseOutput struct {
	ok     bool
	err    string // held, not-held, stale-fence
	holder string // acquire's: the winner, or the holder that refused it
	fence  int64
}

// leaseModel is the claim's sequential specification without time: an
// acquire of a free claim wins the next fence, the holder's own acquire
// keeps its fence, anyone else's is refused with the holder and fence; a
// release by the holder of that fence frees it, any other is refused as
// stale (an older fence) or not held.
var leaseModel = porcupine.Model{
	Init: func() any { return leaseState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(leaseState), input.(leaseInput), output.(leaseOutput)
		switch in.op {
		case "acquire":
			switch {
			case !st.held:
				next := leaseState{in.holder, st.fence + 1, true}
				return out.ok && out.holder == in.holder && out.fence == next.fence, next
			case st.holder == in.holder:
				return out.ok && out.fence == st.fence, st
			default:
				return !out.ok && out.err == "held" && out.holder == st.holder && out.fence == st.fence, st
			}
		case "release":
			if st.fence > 0 && st.holder == in.holder && st.fence == in.fence {
				return out.ok, leaseState{st.holder, st.fence, false}
			}
			want := "not-held"
			if st.fence > in.fence {
				want = "stale-fence"
			}
			return !out.ok && out.err == want, st
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string { return fmt.Sprintf("%+v -> %+v", input, output) },
}

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
				in := leaseInput{op: "acquire", holder: holder}
				if rand.IntN(2) == 0 {
					in = leaseInput{op: "release", holder: holder, fence: max(1, fence-int64(rand.IntN(2)))}
				}
				call0 := time.Since(start).Nanoseconds()
				var a answer
				if in.op == "acquire" {
					a = call(ctx, "POST", pick().url("/v1/claims/lin"), fmt.Sprintf(`{"holder":%q,"ttl_ms":600000}`, holder))
				} else {
					a = call(ctx, "DELETE", pick().url(fmt.Sprintf("/v1/claims/lin?holder=%s&fence=%d", holder, in.fence)), "")
				}
				ret := time.Since(start).Nanoseconds()
				out := leaseOutput{ok: a.code/100 == 2, err: a.problem(), fence: a.int("fence")}
				out.holder, _ = a.body["holder"].(string)
				if a.code != 200 && a.code != 204 && a.code != 409 {
					t.Errorf("%+v: %d %v %v", in, a.code, a.body, a.err)
					return
				}
				if in.op == "acquire" && out.ok {
					fence = out.fence
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: w, Input: in, Call: call0, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if res := porcupine.CheckOperationsTimeout(leaseModel, history, 30*time.Second); res != porcupine.Ok {
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
