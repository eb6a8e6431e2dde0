package server

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestEdgesChartSeriesByStatus holds each series' edge: a 499 is a client
// error, a 500 a server error (not a client one), a 399 neither; every
// answer is a request.
func TestEdgesChartSeriesByStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 5, 42, 10, 0, time.UTC)
	var r rates
	for _, status := range []int{200, 399, 400, 499, 500, 503} {
		r.count("acme", status, now)
	}
	want := map[string]int64{"requests": 6, "client errors (4xx)": 2, "server errors (5xx)": 2}
	for _, c := range r.charts("acme", now) {
		if c.Total != want[c.Title] {
			t.Errorf("%s: %d, want %d (of 200, 399, 400, 499, 500, 503)", c.Title, c.Total, want[c.Title])
		}
	}
}

// TestEdgesChartSlotIsEmptiedForItsNewMinute holds the ring's reuse: a
// minute's slot, which counted the same minute an hour ago, starts again
// from zero, so now's bar counts now's requests only.
func TestEdgesChartSlotIsEmptiedForItsNewMinute(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 5, 42, 10, 0, time.UTC)
	var r rates
	for range 3 {
		r.count("acme", 500, now.Add(-time.Hour))
	}
	r.count("acme", 200, now)
	for _, c := range r.charts("acme", now) {
		want := map[string]int64{"requests": 1}[c.Title]
		if c.Total != want || c.Peak != want {
			t.Errorf("%s: total %d, peak %d, want %d: the slot kept the hour before's counts", c.Title, c.Total, c.Peak, want)
		}
	}
}

// TestEdgesChartBarsAreAtLeastOneUnitHigh holds the bars' rounding: the
// busiest minute fills the chart's height, and a minute with one request
// beside a minute of a thousand still draws a bar one unit high, never 0.
func TestEdgesChartBarsAreAtLeastOneUnitHigh(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 5, 42, 10, 0, time.UTC)
	var r rates
	r.count("acme", 200, now.Add(-time.Minute))
	for range 1000 {
		r.count("acme", 200, now)
	}
	c := r.charts("acme", now)[0]
	if len(c.Bars) != 2 {
		t.Fatalf("bars %+v, want two", c.Bars)
	}
	if small, big := c.Bars[0], c.Bars[1]; small.H != 1 || small.Y != rateHeight-1 || big.H != rateHeight || big.Y != 0 {
		t.Fatalf("bars %+v, want the minute of 1 request 1 unit high and that of 1000 the chart's %d", c.Bars, rateHeight)
	}
}

// TestEdgesChartTenantsAtTheirBound holds maxRateTenants: the charts count
// that many tenants, the last one included, and not one more.
func TestEdgesChartTenantsAtTheirBound(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 5, 42, 10, 0, time.UTC)
	var r rates
	for i := range maxRateTenants {
		r.count(fmt.Sprintf("t%05d", i), 200, now)
	}
	last := fmt.Sprintf("t%05d", maxRateTenants-1)
	if c := r.charts(last, now)[0]; c.Total != 1 {
		t.Fatalf("the %dth tenant: %d requests charted, want 1", maxRateTenants, c.Total)
	}
	r.count("one-too-many", 200, now)
	if c := r.charts("one-too-many", now)[0]; c.Total != 0 || len(r.m) != maxRateTenants {
		t.Fatalf("tenant %d: %d requests charted, %d tenants held, want none counted past %d", maxRateTenants+1, c.Total, len(r.m), maxRateTenants)
	}
}

// TestEdgesListCursorAtItsBound holds a text sort key's bound: one of
// exactly dashTextMax bytes (the longest key a list shows) pages on, one
// byte more is refused.
func TestEdgesListCursorAtItsBound(t *testing.T) {
	t.Parallel()
	at := strings.Repeat("k", dashTextMax)
	l, err := parseList(url.Values{"audit.after": {at}}, auditList)
	if err != nil || len(l.after) != 1 || l.after[0] != at {
		t.Fatalf("a sort key of %d bytes: %v, %v", dashTextMax, l, err)
	}
	if _, err := parseList(url.Values{"audit.after": {at + "k"}}, auditList); err == nil {
		t.Fatalf("a sort key of %d bytes was taken", dashTextMax+1)
	}
}
