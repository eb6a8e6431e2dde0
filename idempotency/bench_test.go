package idempotency_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// BenchmarkMiddleware measures what the middleware adds to a request: the
// bare handler, a first request (lease, record, completion), and a replay.
// It reports the p50 latency beside ns/op and allocations.
func BenchmarkMiddleware(b *testing.B) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"o_1"}`))
	})
	for _, engine := range testdb.Engines {
		b.Run(engine, func(b *testing.B) {
			db := testdb.Open(b, testdb.NewDSN(b, engine), nil)
			h := idempotency.New(db, nil).Middleware(idempotency.MiddlewareOptions{})(next)
			run := func(b *testing.B, handler http.Handler, key func(i int) string) {
				b.ReportAllocs()
				lat := make([]time.Duration, 0, b.N)
				for i := 0; b.Loop(); i++ {
					req := httptest.NewRequest("POST", "/v1/orders", strings.NewReader(`{"sku":"x"}`))
					if k := key(i); k != "" {
						req.Header.Set(idempotency.Header, k)
					}
					start := time.Now()
					rec := httptest.NewRecorder()
					handler.ServeHTTP(rec, req)
					lat = append(lat, time.Since(start))
					if rec.Code != http.StatusCreated {
						b.Fatalf("status %d: %s", rec.Code, rec.Body)
					}
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			}
			b.Run("bare-handler", func(b *testing.B) { run(b, next, func(int) string { return "" }) })
			b.Run("first-request", func(b *testing.B) { run(b, h, func(i int) string { return fmt.Sprintf("k-%d-%d", b.N, i) }) })
			b.Run("replay", func(b *testing.B) { run(b, h, func(int) string { return "same" }) })
		})
	}
}
