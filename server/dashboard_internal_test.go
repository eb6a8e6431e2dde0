package server

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// TestSessionSeal: a session cookie opens to its keys and the tenant it
// views, each key until its own expiry and not from then on, the cookie
// not once none is left; a cookie changed in any byte, sealed under
// another secret, or two cookies spliced together never open, so no
// cookie holds a key its person did not sign in with; the CSRF token
// differs per session.
func TestSessionSeal(t *testing.T) {
	t.Parallel()
	d := newDashboard(bytes.Repeat([]byte{1}, 32))
	now := time.Now()
	one := func(cred string, exp time.Time) session { return session{keys: []heldKey{{cred, exp}}, view: "acme"} }
	c := d.seal(one("rfk_key", now.Add(time.Hour)))
	if strings.Contains(c, "rfk_key") {
		t.Fatalf("the cookie %q holds the key in clear", c)
	}
	if got, ok := d.open(c, now); !ok || len(got.keys) != 1 || got.keys[0].cred != "rfk_key" || got.view != "acme" {
		t.Fatalf("open before expiry: %+v, %v", got, ok)
	}
	if _, ok := d.open(c, now.Add(time.Hour)); ok {
		t.Fatal("a session opened at its expiry")
	}
	if _, ok := d.open(d.seal(one("rfk_key", now.Add(-time.Millisecond))), now); ok {
		t.Fatal("an expired session opened")
	}
	two := d.seal(session{keys: []heldKey{{"rfk_a", now.Add(time.Minute)}, {"rfk_b", now.Add(time.Hour)}}, view: "globex"})
	if got, ok := d.open(two, now); !ok || len(got.keys) != 2 || got.keys[1].cred != "rfk_b" || got.view != "globex" {
		t.Fatalf("two keys: %+v, %v", got, ok)
	}
	if got, ok := d.open(two, now.Add(2*time.Minute)); !ok || len(got.keys) != 1 || got.keys[0].cred != "rfk_b" {
		t.Fatalf("two keys, the first expired: %+v, %v", got, ok)
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		b := bytes.Clone(raw)
		b[i] ^= 1
		if _, ok := d.open(base64.RawURLEncoding.EncodeToString(b), now); ok {
			t.Fatalf("a cookie changed at byte %d opened", i)
		}
	}
	raw2, _ := base64.RawURLEncoding.DecodeString(two)
	for _, spliced := range [][]byte{append(bytes.Clone(raw), raw2[d.aead.NonceSize():]...), append(bytes.Clone(raw2[:d.aead.NonceSize()]), raw[d.aead.NonceSize():]...)} {
		if _, ok := d.open(base64.RawURLEncoding.EncodeToString(spliced), now); ok {
			t.Fatal("two cookies spliced together opened")
		}
	}
	if _, ok := newDashboard(bytes.Repeat([]byte{2}, 32)).open(c, now); ok {
		t.Fatal("a cookie opened under another secret")
	}
	if d.csrf(c) == d.csrf(d.seal(one("rfk_key", now.Add(time.Hour)))) {
		t.Fatal("two sessions share a CSRF token")
	}
}

// TestChartTimeAxis: each chart's time axis names the first bar's minute,
// the middle one and now's, in UTC, and each bar names its minute.
func TestChartTimeAxis(t *testing.T) {
	t.Parallel()
	var r rates
	now := time.Date(2026, 12, 2, 5, 42, 10, 0, time.UTC)
	r.count("acme", 200, now.Add(-2*time.Minute))
	c := r.charts("acme", now)[0]
	if c.Axis != [3]string{"04:43", "05:13", "05:42"} {
		t.Fatalf("axis %v, want 04:43, 05:13, 05:42", c.Axis)
	}
	if len(c.Bars) != 1 || c.Bars[0].X != 57 || c.Bars[0].Label != "1 requests at 05:40 UTC, 2 min ago" {
		t.Fatalf("bars %+v, want one at 05:40", c.Bars)
	}
}

// TestChartTimeAxisAtTheHoursEdges tries the last hour at its edges: a
// request 59 minutes ago is the first bar, named by its minute, and one
// 60 minutes ago, whose minute shares a slot of the ring with now's, is
// in no chart; a request now is the last bar, 0 min ago.
func TestChartTimeAxisAtTheHoursEdges(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 5, 42, 10, 0, time.UTC)
	var r rates
	r.count("acme", 500, now.Add(-60*time.Minute))
	r.count("acme", 200, now.Add(-59*time.Minute))
	for _, c := range r.charts("acme", now) {
		if c.Axis != [3]string{"04:43", "05:13", "05:42"} {
			t.Fatalf("%s: axis %v, want 04:43, 05:13, 05:42", c.Title, c.Axis)
		}
		if c.Title != "requests" {
			if len(c.Bars) != 0 || c.Total != 0 {
				t.Fatalf("%s: bars %+v (total %d), want none: the 5xx answer was 60 minutes ago", c.Title, c.Bars, c.Total)
			}
			continue
		}
		if len(c.Bars) != 1 || c.Total != 1 || c.Bars[0].X != 0 || c.Bars[0].Label != "1 requests at 04:43 UTC, 59 min ago" {
			t.Fatalf("requests: bars %+v (total %d), want one at 04:43, the first minute", c.Bars, c.Total)
		}
	}
	var n rates
	n.count("acme", 200, now)
	c := n.charts("acme", now)[0]
	if len(c.Bars) != 1 || c.Bars[0].X != rateBuckets-1 || c.Bars[0].Label != "1 requests at 05:42 UTC, 0 min ago" {
		t.Fatalf("bars %+v, want one at 05:42, the last minute", c.Bars)
	}
}
