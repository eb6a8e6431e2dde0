package quota_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/quota"
)

func TestMiddlewareAnswers429WithHeaders(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, func(t *testing.T, db *racefree.DB, l *quota.Limiter, clock *racefree.ManualClock) {
		p := quota.Policy{Name: "api", Kind: quota.GCRA, Rate: 1, Per: 1500 * time.Millisecond, Burst: 2, Wait: time.Minute}
		mw, err := l.Middleware(db, p, quota.KeyByIP)
		if err != nil {
			t.Fatal(err)
		}
		served := 0
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
		get := func(addr string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = addr
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		want := []struct {
			status                int
			rateLimit, retryAfter string
		}{
			{200, `"api";r=1;t=2`, ""}, // full again in 1.5 s, rounded up
			{200, `"api";r=0;t=3`, ""},
			{429, `"api";r=0;t=3`, "2"}, // 1.5 s, rounded up
		}
		for i, w := range want {
			got := get("[2001:db8:1:2::5]:4000")
			if got.Code != w.status || got.Header().Get("RateLimit") != w.rateLimit || got.Header().Get("Retry-After") != w.retryAfter {
				t.Fatalf("request %d: %d RateLimit %q Retry-After %q; want %d %q %q", i+1, got.Code,
					got.Header().Get("RateLimit"), got.Header().Get("Retry-After"), w.status, w.rateLimit, w.retryAfter)
			}
			if got, want := got.Header().Get("RateLimit-Policy"), `"api";q=2;w=3`; got != want {
				t.Fatalf("RateLimit-Policy %q, want %q", got, want)
			}
			if w.status == 429 {
				var body struct {
					Type         string `json:"type"`
					Status       int    `json:"status"`
					RetryAfterMs int64  `json:"retry_after_ms"`
				}
				if err := json.Unmarshal(got.Body.Bytes(), &body); err != nil {
					t.Fatal(err)
				}
				if body.Type != "urn:racefree:problem:quota-exceeded" || body.Status != 429 || body.RetryAfterMs != 1500 {
					t.Fatalf("429 body %+v", body)
				}
				if ct := got.Header().Get("Content-Type"); ct != "application/problem+json" {
					t.Fatalf("Content-Type %q", ct)
				}
			}
		}
		if served != 2 {
			t.Fatalf("next served %d requests, want 2", served)
		}
		// Another address of the same /64 shares the limit; another /64
		// and an IPv4 client have their own.
		if got := get("[2001:db8:1:2:ffff::1]:1"); got.Code != 429 {
			t.Fatalf("same /64: %d, want 429", got.Code)
		}
		if got := get("[2001:db8:1:3::5]:1"); got.Code != 200 {
			t.Fatalf("next /64: %d, want 200", got.Code)
		}
		if got := get("192.0.2.1:1"); got.Code != 200 {
			t.Fatalf("IPv4: %d, want 200", got.Code)
		}
	})
}

func TestKeyByIP(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"192.0.2.7:80":              "ip:192.0.2.7",
		"[::ffff:192.0.2.7]:80":     "ip:192.0.2.7",
		"[2001:db8::1]:80":          "ip:2001:db8::/64",
		"[2001:db8:0:0:abcd::9]:80": "ip:2001:db8::/64",
		"[fe80::1%eth0]:80":         "ip:fe80::/64",
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = addr
		if got, err := quota.KeyByIP(r); err != nil || got != want {
			t.Errorf("KeyByIP(%s) = %q, %v; want %q", addr, got, err, want)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "not-an-ip"
	if _, err := quota.KeyByIP(r); err == nil {
		t.Error("KeyByIP of a non-address: no error")
	}
}
