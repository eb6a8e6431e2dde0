package server_test

import (
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/conformance"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestCombinedHTTPClaimsAreLinearizable checks that with Config.Combine,
// claim acquires and releases over HTTP without an Idempotency-Key run on
// the pool, where the combiner batches them with other requests' calls,
// and keep their semantics: 16 clients, each on a key of its own (won at
// fence 1, 2, … and released in turn) and all on one shared key, whose
// history is linearizable. Every call after the tenant's first ran in a
// batch.
func TestCombinedHTTPClaimsAreLinearizable(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn}, func(t *testing.T, db *racefree.DB) {
		h := server.New(db, server.Options{}).Handler()
		clients, rounds := 16, testdb.Scale(8, 60)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			history []porcupine.Operation
			calls   int
		)
		// The tenant's first call registers it, alone; every later call
		// is combined.
		if code, _, _ := do(t, h, "GET", "/v1/claims/warm-up", ""); code != 404 {
			t.Fatalf("warm-up: %d", code)
		}
		if code, _, _ := do(t, h, "POST", "/v1/claims/warm-up", `{"holder":"w","ttl_ms":1000}`); code != 200 {
			t.Fatalf("warm-up: %d", code)
		}
		before := db.CombineStats()
		start := time.Now()
		for w := range clients {
			wg.Go(func() {
				holder, own := fmt.Sprintf("h%d", w), fmt.Sprintf("own-%d", w)
				var fence int64
				n := 0
				for r := range rounds {
					code, body, _ := do(t, h, "POST", "/v1/claims/"+own, fmt.Sprintf(`{"holder":%q,"ttl_ms":600000}`, holder))
					if code != 200 || body["fence"] != float64(r+1) {
						t.Errorf("%s round %d: acquire %d %v; want 200 at fence %d", own, r, code, body, r+1)
						return
					}
					if code, body, _ = do(t, h, "DELETE", fmt.Sprintf("/v1/claims/%s?holder=%s&fence=%d", own, holder, r+1), ""); code != 204 {
						t.Errorf("%s round %d: release %d %v", own, r, code, body)
						return
					}
					in := conformance.LeaseInput{Op: "acquire", Holder: holder}
					if rand.IntN(2) == 0 {
						in = conformance.LeaseInput{Op: "release", Holder: holder, Fence: max(1, fence-int64(rand.IntN(2)))}
					}
					call := time.Since(start).Nanoseconds()
					var body2 map[string]any
					if in.Op == "acquire" {
						code, body2, _ = do(t, h, "POST", "/v1/claims/shared", fmt.Sprintf(`{"holder":%q,"ttl_ms":600000}`, holder))
					} else {
						code, body2, _ = do(t, h, "DELETE", fmt.Sprintf("/v1/claims/shared?holder=%s&fence=%d", holder, in.Fence), "")
					}
					ret := time.Since(start).Nanoseconds()
					out := conformance.LeaseOutput{OK: code/100 == 2}
					out.Holder, _ = body2["holder"].(string)
					if f, ok := body2["fence"].(float64); ok {
						out.Fence = int64(f)
					}
					if typ, ok := body2["type"].(string); ok && len(typ) > len("urn:racefree:problem:") {
						out.Err = typ[len("urn:racefree:problem:"):]
					}
					if code != 200 && code != 204 && code != 409 {
						t.Errorf("%+v: %d %v", in, code, body2)
						return
					}
					if in.Op == "acquire" && out.OK {
						fence = out.Fence
					}
					n += 3
					mu.Lock()
					history = append(history, porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret})
					mu.Unlock()
				}
				mu.Lock()
				calls += n
				mu.Unlock()
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		if res := porcupine.CheckOperationsTimeout(conformance.LeaseModel, history, 30*time.Second); res != porcupine.Ok {
			t.Fatalf("the shared claim's history over HTTP with the combiner is not linearizable (%v): %d operations", res, len(history))
		}
		st := db.CombineStats()
		st.Ops -= before.Ops
		st.Batches -= before.Batches
		if st.Failed != 0 || st.Ops != int64(calls) {
			t.Fatalf("combiner stats %+v; want all %d calls in batches that committed", st, calls)
		}
		t.Logf("%d calls in %d batches (largest %d)", st.Ops, st.Batches, st.MaxBatch)
		// /metrics shows the same figures.
		req := httptest.NewRequest("GET", "/metrics", nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		for _, want := range []string{
			fmt.Sprintf("racefree_combine_operations_total %d\n", before.Ops+int64(calls)),
			fmt.Sprintf("racefree_combine_unknown_batches_total %d\n", db.CombineStats().Unknown),
		} {
			if !strings.Contains(rec.Body.String(), want) {
				t.Fatalf("/metrics has no %q", want)
			}
		}
	})
}
