package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// BenchmarkReceive measures new deliveries per second, each recording one
// effect row inside its transaction, from 8 goroutines per CPU: through
// the Go API, and through the HTTP handler with signature verification, all
// on one source; and through the Go API spread over 16 sources, whose
// arrival numbers do not contend.
func BenchmarkReceive(b *testing.B) {
	const payload = `{"type":"invoice.paid","data":{"invoice":"in_1","amount":4200}}`
	for _, engine := range testdb.Engines {
		for _, via := range []string{"api", "http", "api-16-sources"} {
			b.Run(engine+"/"+via, func(b *testing.B) {
				bd := setup(b, testdb.Open(b, testdb.NewDSN(b, engine), nil), nil)
				v, err := inbox.NewVerifier([]string{secretA}, nil)
				if err != nil {
					b.Fatal(err)
				}
				h := &inbox.Handler{Inbox: bd.in, Source: "bench", Verifier: v,
					Process: func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) error { return bd.effect(ctx, d.ID)(tx) }}
				var next atomic.Int64
				ctx := context.Background()
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						n := next.Add(1)
						id, source := fmt.Sprintf("evt_%d", n), "bench"
						if via == "api-16-sources" {
							source = fmt.Sprintf("bench%d", n%16)
						}
						if via != "http" {
							res, err := bd.in.Receive(ctx, source, id, []byte(payload), bd.effect(ctx, id))
							if err != nil || res.Duplicate {
								b.Errorf("%+v %v", res, err)
							}
							continue
						}
						now := time.Now()
						sig, _ := inbox.Sign(secretA, id, now, []byte(payload))
						req := httptest.NewRequest("POST", "/", strings.NewReader(payload))
						req.Header.Set("webhook-id", id)
						req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
						req.Header.Set("webhook-signature", sig)
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, req)
						if rec.Code != http.StatusNoContent {
							b.Errorf("status %d: %s", rec.Code, rec.Body)
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
			})
		}
	}
}
