package claim_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
)

// The model of one key's claim, against which recorded histories of
// concurrent Acquire, Renew and Release calls are checked for
// linearizability. Time moves in rounds: every call of a round runs with
// the clock at the round's now, and rounds do not overlap.

type lState struct {
	exists  bool
	holder  string
	fence   int64
	expires int64
}

type lInput struct {
	op     string // acquire, renew, release
	holder string
	fence  int64
	ttl    int64
	now    int64
}

type lOutput struct {
	ok      bool
	err     string // held, stale, notheld
	holder  string
	fence   int64
	expires int64
}

func errKind(st lState, fence int64) string {
	if st.exists && st.fence > fence {
		return "stale"
	}
	return "notheld"
}

var claimModel = porcupine.Model{
	Init: func() any { return lState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(lState), input.(lInput), output.(lOutput)
		free := !st.exists || st.expires <= in.now
		switch in.op {
		case "acquire":
			switch {
			case free:
				next := lState{true, in.holder, st.fence + 1, in.now + in.ttl}
				return out.ok && out.holder == in.holder && out.fence == next.fence && out.expires == next.expires, next
			case st.holder == in.holder:
				next := lState{true, in.holder, st.fence, in.now + in.ttl}
				return out.ok && out.fence == st.fence && out.expires == next.expires, next
			default:
				return !out.ok && out.err == "held" && out.holder == st.holder && out.fence == st.fence && out.expires == st.expires, st
			}
		case "renew":
			if st.exists && st.holder == in.holder && st.fence == in.fence && !free {
				next := lState{true, st.holder, st.fence, in.now + in.ttl}
				return out.ok && out.fence == st.fence && out.expires == next.expires, next
			}
			return !out.ok && out.err == errKind(st, in.fence), st
		case "release":
			if st.exists && st.holder == in.holder && st.fence == in.fence {
				next := st
				next.expires = min(st.expires, in.now)
				return out.ok, next
			}
			return !out.ok && out.err == errKind(st, in.fence), st
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%+v -> %+v", input, output)
	},
}

func TestHistoriesAreLinearizable(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		const (
			rounds  = 40
			workers = 8
			step    = int64(1000)
		)
		holders := []string{"h0", "h1", "h2", "h3"}
		var (
			mu      sync.Mutex
			history []porcupine.Operation
			fences  = map[string]int64{} // the last fence each holder won
		)
		start := time.Now()
		ctx := context.Background()
		for round := range rounds {
			now := racefree.Millis(b.clock.Now())
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					mu.Lock()
					in := lInput{holder: holders[rand.IntN(len(holders))], ttl: step * (1 + rand.Int64N(3)), now: now}
					in.fence = max(fences[in.holder], 1) // a holder that never won guesses the first fence
					mu.Unlock()
					switch r := rand.IntN(10); {
					case r < 5:
						in.op = "acquire"
					case r < 8:
						in.op = "renew"
					default:
						in.op = "release"
					}
					call := time.Since(start).Nanoseconds()
					out := apply(ctx, b.claims, b.db, in)
					ret := time.Since(start).Nanoseconds()
					mu.Lock()
					defer mu.Unlock()
					if out.err == "unexpected" {
						t.Errorf("round %d worker %d: %+v", round, w, out)
					}
					if out.ok && in.op == "acquire" {
						fences[in.holder] = out.fence
					}
					history = append(history, porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret})
				}()
			}
			wg.Wait()
			b.clock.Advance(time.Duration(step) * time.Millisecond)
		}
		if res := porcupine.CheckOperationsTimeout(claimModel, history, 30*time.Second); res != porcupine.Ok {
			t.Fatalf("history of %d operations is not linearizable (%v)", len(history), res)
		}
	})
}

func apply(ctx context.Context, claims *claim.Store, db *racefree.DB, in lInput) lOutput {
	ttl := time.Duration(in.ttl) * time.Millisecond
	var (
		c   *claim.Claim
		err error
	)
	switch in.op {
	case "acquire":
		c, err = claims.Acquire(ctx, db, "k", in.holder, ttl)
	case "renew":
		c, err = claims.Renew(ctx, db, "k", in.holder, in.fence, ttl)
	case "release":
		err = claims.Release(ctx, db, "k", in.holder, in.fence)
	}
	var held *claim.HeldError
	switch {
	case err == nil && c == nil:
		return lOutput{ok: true}
	case err == nil:
		return lOutput{ok: true, holder: c.Holder, fence: c.Fence, expires: racefree.Millis(c.ExpiresAt)}
	case errors.As(err, &held):
		return lOutput{err: "held", holder: held.Claim.Holder, fence: held.Claim.Fence, expires: racefree.Millis(held.Claim.ExpiresAt)}
	case errors.Is(err, racefree.ErrStaleFence):
		return lOutput{err: "stale"}
	case errors.Is(err, racefree.ErrNotHeld):
		return lOutput{err: "notheld"}
	}
	return lOutput{err: "unexpected", holder: err.Error()}
}
