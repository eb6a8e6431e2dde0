package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/bench/internal/chart"
	"github.com/racefree/racefree/bench/internal/run"
	"github.com/racefree/racefree/server"
)

// overHTTP measures the same pairs through racefree's HTTP API: a server
// ([server.New], as racefree serve runs it) on loopback for each database,
// and keep-alive clients that POST /v1/claims/{key} then DELETE it, with
// no Idempotency-Key, so that the claim calls run on the pool and the
// combiner can batch them. It returns the chart's panel and each number
// of clients' results (off, then the combiner).
func overHTTP(ctx context.Context, name string, off, on *racefree.DB, redisCells map[int]run.Result, notes *[]string) (chart.Panel, map[int][]run.Result, error) {
	p := panel(name + ", HTTP")
	cells := map[int][]run.Result{}
	urls := make([]string, 2)
	for i, db := range []*racefree.DB{off, on} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return p, nil, err
		}
		h := server.New(db, server.Options{Logger: slog.New(slog.DiscardHandler)}).Handler()
		if *cpuProf != "" {
			h = labelled(h, pprof.Labels("cell", name+"-"+[]string{"off", "on"}[i]+"-server"))
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		urls[i] = "http://" + ln.Addr().String()
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128}}
	call := func(ctx context.Context, method, url, body string, want int) error {
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
	for _, n := range clients {
		if err := freshStatistics(ctx, off); err != nil {
			return p, nil, err
		}
		pair := func(base, prefix string) run.Op {
			return func(ctx context.Context, c, i int) error {
				url := fmt.Sprintf("%s/v1/claims/%s-%d-%d", base, prefix, c, i)
				if err := call(ctx, "POST", url, `{"holder":"w","ttl_ms":60000}`, http.StatusOK); err != nil {
					return err
				}
				// A fresh key's first tenure has fence 1.
				return call(ctx, "DELETE", url+"?holder=w&fence=1", "", http.StatusNoContent)
			}
		}
		cell := fmt.Sprintf("%d-%d", n, time.Now().UnixNano())
		offOp, onOp := pair(urls[0], "hoff-"+cell), pair(urls[1], "hon-"+cell)
		if *cpuProf != "" {
			offOp, onOp = labelledOp(offOp, name+"-off-client"), labelledOp(onOp, name+"-on-client")
		}
		before := on.CombineStats()
		r := run.Alternately(ctx, n, *cellTime, offOp, onOp)
		row(name+", HTTP", n, r, redisCells, &p)
		cells[n] = r
		if note := batchNote(name+", HTTP", n, before, on.CombineStats()); note != "" {
			*notes = append(*notes, note)
		}
	}
	return p, cells, nil
}

// labelled labels the goroutine that serves each request with labels, for
// -cpuprofile: a connection's goroutine keeps them, so its reading and
// parsing of the next request count as well.
func labelled(h http.Handler, labels pprof.LabelSet) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pprof.SetGoroutineLabels(pprof.WithLabels(r.Context(), labels))
		h.ServeHTTP(w, r)
	})
}

// labelledOp labels the client goroutine that runs op with cell=value,
// for -cpuprofile.
func labelledOp(op run.Op, value string) run.Op {
	labels := pprof.Labels("cell", value)
	return func(ctx context.Context, c, i int) error {
		pprof.SetGoroutineLabels(pprof.WithLabels(ctx, labels))
		return op(ctx, c, i)
	}
}
