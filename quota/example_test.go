package quota_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/sqlite"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "racefree-example")
	defer os.RemoveAll(dir)
	clock := racefree.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	db, err := sqlite.Open(ctx, filepath.Join(dir, "racefree.db"), &racefree.Config{Clock: clock, Schema: racefree.SchemaMigrate})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	limiter, err := quota.New(db, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	// 10 requests a second, in bursts of up to 3.
	policy := quota.Policy{Kind: quota.GCRA, Rate: 10, Per: time.Second, Burst: 3}
	for range 4 {
		d, err := limiter.Consume(ctx, db, "user:42", 1, policy)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 100ms
}

func ExampleLimiter_Middleware() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "racefree-example")
	defer os.RemoveAll(dir)
	clock := racefree.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	db, err := sqlite.Open(ctx, filepath.Join(dir, "racefree.db"), &racefree.Config{Clock: clock, Schema: racefree.SchemaMigrate})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	limiter, _ := quota.New(db, nil)
	// 2 requests a second per client address (an IPv6 client per /64).
	limit, err := limiter.Middleware(db, quota.Policy{Name: "api", Kind: quota.GCRA, Rate: 2, Per: time.Second, Burst: 2}, quota.KeyByIP)
	if err != nil {
		fmt.Println(err)
		return
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") }))
	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "[2001:db8::1]:40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit: "api";r=1;t=1 Retry-After: ""
	// 200 RateLimit: "api";r=0;t=1 Retry-After: ""
	// 429 RateLimit: "api";r=0;t=1 Retry-After: "1"
}
