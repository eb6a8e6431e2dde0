package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/cputime"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// BenchmarkClaimOverHTTP measures one claim Acquire then Release over HTTP
// (POST /v1/claims/{key}, then DELETE it at fence 1, on a fresh key), as
// bench/claims' "sqlite, HTTP" rows do: a server on a loopback listener,
// keep-alive clients, no Idempotency-Key, the access log discarded, on
// SQLite, with the combiner off and on, from 1 and 64 client goroutines;
// and, as served/…, the combiner's cell with what racefree serve adds by
// default: its connection timeouts, a RequestTimeout of 20 s and the access
// log at Info, as text (to os.DevNull). Its time and allocations per pair
// are the client's and the server's together (both run in this process),
// and so is cpu-ns/op, the CPU time (user and system) the process spent
// per pair, which a shared machine's load inflates far less than the time;
// compare them with benchstat, run before and after back to back.
func BenchmarkClaimOverHTTP(b *testing.B) {
	for _, c := range []struct {
		combine, served bool
		clients         []int
	}{{false, false, []int{1, 64}}, {true, false, []int{64}}, {true, true, []int{64}}} {
		policy := racefree.CombineOff
		if c.combine {
			policy = racefree.CombineOn
		}
		db := testdb.Open(b, testdb.NewDSN(b, racefree.SQLite), &racefree.Config{MaxOpenConns: 16, Combine: policy})
		opts, name := server.Options{Logger: slog.New(slog.DiscardHandler)}, fmt.Sprintf("combine=%v", c.combine)
		if c.served {
			null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { null.Close() })
			opts, name = server.Options{Logger: slog.New(slog.NewTextHandler(null, nil)), RequestTimeout: 20 * time.Second}, "served/"+name
		}
		srv := httptest.NewUnstartedServer(server.New(db, opts).Handler())
		if c.served { // serve's defaults
			srv.Config.ReadHeaderTimeout, srv.Config.ReadTimeout, srv.Config.WriteTimeout, srv.Config.IdleTimeout = 10*time.Second, 15*time.Second, 30*time.Second, 60*time.Second
		}
		srv.Start()
		b.Cleanup(srv.Close)
		hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128}}
		b.Cleanup(hc.CloseIdleConnections)
		var next atomic.Int64
		pair := func(ctx context.Context) error {
			url := fmt.Sprintf("%s/v1/claims/k-%d", srv.URL, next.Add(1))
			if err := call(ctx, hc, "POST", url, `{"holder":"w","ttl_ms":60000}`, http.StatusOK); err != nil {
				return err
			}
			return call(ctx, hc, "DELETE", url+"?holder=w&fence=1", "", http.StatusNoContent)
		}
		// The tenant's first call registers it; warm the pool and the
		// connections up before timing.
		for range 64 {
			if err := pair(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
		for _, clients := range c.clients {
			b.Run(fmt.Sprintf("%s/clients=%d", name, clients), func(b *testing.B) {
				b.ReportAllocs()
				cpu := cputime.Process()
				defer func() { cputime.PerOp(b, cpu, b.N) }()
				if clients == 1 {
					for b.Loop() {
						if err := pair(b.Context()); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0))) // RunParallel starts GOMAXPROCS × this goroutines
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := pair(context.Background()); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// call sends one request and reads its answer to the end, so that the
// connection is reused; an answer other than want is an error.
func call(ctx context.Context, hc *http.Client, method, url, body string, want int) error {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return nil
}
