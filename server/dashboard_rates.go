package server

import (
	"fmt"
	"sync"
	"time"
)

// The dashboard's charts: the last hour of each tenant's /v1/ requests, a
// bar per minute, counted in memory by this process as it counts
// racefree_http_requests_total. They start empty at each start, and on
// PostgreSQL with several instances each shows its own traffic.
const (
	rateBuckets    = 60          // minutes
	maxRateTenants = 10000       // tenants counted; past it, new tenants are not
	rateWidth      = rateBuckets // the chart's view box: a bar per minute
	rateHeight     = 40
)

// series are the counters charted, in order.
var series = []string{"requests", "client errors (4xx)", "server errors (5xx)"}

// rates is a ring of per-minute counts per tenant and series.
type rates struct {
	mu sync.Mutex
	m  map[string]*ring
}

type ring struct {
	minute [rateBuckets]int64 // the Unix minute each bucket counts
	counts [rateBuckets][3]int64
}

// count adds one request of tenant t, answered with status, at now.
func (r *rates) count(t string, status int, now time.Time) {
	m := now.Unix() / 60
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*ring{}
	}
	g := r.m[t]
	if g == nil {
		if len(r.m) >= maxRateTenants {
			return
		}
		g = &ring{}
		r.m[t] = g
	}
	i := m % rateBuckets
	if g.minute[i] != m {
		g.minute[i], g.counts[i] = m, [3]int64{}
	}
	g.counts[i][0]++
	switch {
	case status >= 500:
		g.counts[i][2]++
	case status >= 400:
		g.counts[i][1]++
	}
}

// chart is one series' last hour, ready for the template's SVG.
type chart struct {
	Title string
	Total int64
	Peak  int64
	Bars  []bar
	W, H  int
	// Axis labels the time axis at its start, middle and end (UTC,
	// minutes): the first bar's minute, 30 minutes on, and now's.
	Axis [3]string
}

// bar is one minute's bar in the view box.
type bar struct {
	X, Y, H int
	Label   string
}

// charts returns tenant t's charts of the hour before now, oldest minute
// on the left.
func (r *rates) charts(t string, now time.Time) []chart {
	end := now.Unix() / 60
	r.mu.Lock()
	var counts [rateBuckets][3]int64 // counts[k]: the minute end-59+k
	if g := r.m[t]; g != nil {
		for k := range rateBuckets {
			m := end - rateBuckets + 1 + int64(k)
			if i := m % rateBuckets; g.minute[i] == m {
				counts[k] = g.counts[i]
			}
		}
	}
	r.mu.Unlock()
	out := make([]chart, len(series))
	for s, title := range series {
		c := chart{Title: title, W: rateWidth, H: rateHeight}
		for i, k := range []int64{0, rateBuckets / 2, rateBuckets - 1} {
			c.Axis[i] = time.Unix((end-rateBuckets+1+k)*60, 0).UTC().Format("15:04")
		}
		for k := range rateBuckets {
			c.Total += counts[k][s]
			c.Peak = max(c.Peak, counts[k][s])
		}
		for k := range rateBuckets {
			n := counts[k][s]
			if n == 0 {
				continue
			}
			h := int((n*rateHeight + c.Peak - 1) / c.Peak) // at least 1 unit high
			c.Bars = append(c.Bars, bar{X: k, Y: rateHeight - h, H: h,
				Label: fmt.Sprintf("%d %s at %s UTC, %d min ago", n, title, time.Unix((end-rateBuckets+1+int64(k))*60, 0).UTC().Format("15:04"), rateBuckets-1-k)})
		}
		out[s] = c
	}
	return out
}
