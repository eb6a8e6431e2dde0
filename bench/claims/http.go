package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
// combiner can batch them.
func overHTTP(ctx context.Context, name string, off, on *racefree.DB, redisCells map[int]run.Result) (chart.Panel, error) {
	p := panel(name + ", HTTP")
	urls := make([]string, 2)
	for i, db := range []*racefree.DB{off, on} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return p, err
		}
		srv := &http.Server{Handler: server.New(db, server.Options{Logger: slog.New(slog.DiscardHandler)}).Handler(), ReadHeaderTimeout: 10 * time.Second}
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
		r := run.Alternately(ctx, n, *cellTime, pair(urls[0], "hoff-"+cell), pair(urls[1], "hon-"+cell))
		row(name+", HTTP", n, r, redisCells, &p)
	}
	return p, nil
}
