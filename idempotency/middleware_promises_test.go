package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// counting is a handler that counts its runs and answers status with the
// run number in the body.
func counting(runs *atomic.Int64, status *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Not-Stored", "1")
		w.Header().Set("Location", fmt.Sprintf("/v1/orders/%d", n))
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(int(status.Load()))
		fmt.Fprintf(w, "run %d", n)
	})
}

func do(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func post(target, key, body string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return req
}

// Item 1 through HTTP: the client hangs up once the handler ran; the
// response is stored all the same and the retry is a replay.
func TestMiddlewareStoresTheResponseAfterTheClientHangsUp(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs atomic.Int64
		var hangUp context.CancelFunc
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			hangUp() // the client goes away after the side effect
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "order 1")
		}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		hangUp = cancel
		first := do(h, post("/v1/orders", `"k"`, "{}").WithContext(ctx))
		if first.Code != http.StatusCreated {
			t.Fatalf("first: %d %s", first.Code, first.Body)
		}
		retry := do(h, post("/v1/orders", `"k"`, "{}"))
		if retry.Code != http.StatusCreated || retry.Header().Get("Idempotent-Replayed") != "true" || retry.Body.String() != "order 1" {
			t.Fatalf("retry: %d %q replayed=%q; want the stored 201", retry.Code, retry.Body, retry.Header().Get("Idempotent-Replayed"))
		}
		if got := runs.Load(); got != 1 {
			t.Fatalf("handler ran %d times, want 1", got)
		}
	})
}

// The Idempotency-Key header is an RFC 8941 string; unquoted token keys
// are a documented leniency, kept apart from strings.
func TestMiddlewareParsesTheKeyAsAStructuredFieldString(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusCreated)
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(counting(&runs, &status))
		refused := []string{
			`"unterminated`, `"a"b"`, `"a\"`, `"a\x"`, `""`, `"é"`, "\"tab\there\"",
			`:YWJj:`, `:`, `(a b)`, `("a")`, `(`, `)`, `a=1`, `abc;a=1`, `?1`, `?0`, `"a", "b"`, `a, b`,
			`has space`, `a"b`, `a\b`, `@at`, `[x]`, `{x}`, `<x>`, `a,`, `"k";`, `"k";=1`, `"k" x`,
			`"` + strings.Repeat("k", 256) + `"`, strings.Repeat("k", 255),
		}
		for _, key := range refused {
			rec := do(h, post("/v1/orders", key, "{}"))
			if rec.Code != http.StatusBadRequest || rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("key %q: %d, want a 400 problem", key, rec.Code)
			}
		}
		if got := runs.Load(); got != 0 {
			t.Fatalf("the handler ran %d times on refused keys", got)
		}
		two := post("/v1/orders", "", "{}")
		two.Header.Add("Idempotency-Key", `"a"`)
		two.Header.Add("Idempotency-Key", `"b"`)
		if rec := do(h, two); rec.Code != http.StatusBadRequest {
			t.Errorf("two header lines: %d, want 400", rec.Code)
		}

		// Each group is one key: its first value runs, the others replay.
		// Different groups are different keys.
		groups := [][]string{
			{`"abc"`, ` "abc" `, `"abc";a=1`, `"abc";a=1;b="x";c`},
			{`"a\"b"`},
			{`"a\\b"`},
			{`"a b"`, `"a b";x=?0`},
			{`"42"`},
			{`42`, ` 42 `},
			{`abc`},
			{`8e03978e-40d5-43e8-bc93-6894a57f9324`},
			{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
			{`*tok/en:1.5`},
			{`-1`},
			{`"` + strings.Repeat("k", 255) + `"`},
			{strings.Repeat("k", 254)},
			{`" !#$%&'()*+,-./:;<=>?@[]^_{|}~"`},
		}
		for i, group := range groups {
			for j, key := range group {
				rec := do(h, post("/v1/orders", key, "{}"))
				replayed := rec.Header().Get("Idempotent-Replayed") == "true"
				if got, want := rec.Body.String(), fmt.Sprintf("run %d", i+1); rec.Code != http.StatusCreated || got != want || replayed != (j > 0) {
					t.Errorf("key %q: %d %q replayed=%v; want %q replayed=%v", key, rec.Code, got, replayed, want, j > 0)
				}
			}
		}
	})
}

// The fingerprint covers the query string: the same key on the same path
// with another query is another request (422).
func TestMiddlewareFingerprintCoversTheQuery(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusCreated)
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(counting(&runs, &status))
		if rec := do(h, post("/v1/pay?amount=1", `"k"`, "")); rec.Code != http.StatusCreated {
			t.Fatalf("first: %d", rec.Code)
		}
		for _, target := range []string{"/v1/pay?amount=1000", "/v1/pay", "/v1/pay?amount=1&x"} {
			if rec := do(h, post(target, `"k"`, "")); rec.Code != http.StatusUnprocessableEntity {
				t.Errorf("%s with the same key: %d, want 422", target, rec.Code)
			}
		}
		if rec := do(h, post("/v1/pay?amount=1", `"k"`, "")); rec.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("the same request again: %d, want a replay", rec.Code)
		}
		if rec := do(h, post("/v1/pay?amount=1", `"k"`, "{}")); rec.Code != http.StatusUnprocessableEntity {
			t.Errorf("another body: %d, want 422", rec.Code)
		}
		if got := runs.Load(); got != 1 {
			t.Fatalf("handler ran %d times, want 1", got)
		}
	})
}

// The default scope separates principals (WithPrincipal), then
// Authorization headers, then routes; requests with neither share one key
// space.
func TestMiddlewareDefaultScope(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusCreated)
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(counting(&runs, &status))
		as := func(principal, authorization, target string) *http.Request {
			req := post(target, `"k"`, "{}")
			if principal != "" {
				req = req.WithContext(idempotency.WithPrincipal(req.Context(), principal))
			}
			if authorization != "" {
				req.Header.Set("Authorization", authorization)
			}
			return req
		}
		steps := []struct {
			principal, authorization, target string
			wantRun                          string
			wantReplay                       bool
		}{
			{"", "", "/v1/orders", "run 1", false},
			{"", "", "/v1/orders", "run 1", true}, // anonymous clients share one key space
			{"alice", "", "/v1/orders", "run 2", false},
			{"bob", "", "/v1/orders", "run 3", false},
			{"alice", "", "/v1/orders", "run 2", true},
			{"alice", "Bearer other", "/v1/orders", "run 2", true}, // the principal decides, not the header
			{"", "Bearer t1", "/v1/orders", "run 4", false},
			{"", "Bearer t2", "/v1/orders", "run 5", false},
			{"", "Bearer t1", "/v1/orders", "run 4", true},
			{"Bearer t1", "", "/v1/orders", "run 6", false}, // a principal never meets a header of the same text
			{"alice", "", "/v1/refunds", "run 7", false},
		}
		for _, s := range steps {
			rec := do(h, as(s.principal, s.authorization, s.target))
			replayed := rec.Header().Get("Idempotent-Replayed") == "true"
			if rec.Code != http.StatusCreated || rec.Body.String() != s.wantRun || replayed != s.wantReplay {
				t.Errorf("%+v: %d %q replayed=%v", s, rec.Code, rec.Body, replayed)
			}
		}
		if p, ok := idempotency.Principal(idempotency.WithPrincipal(context.Background(), "alice")); !ok || p != "alice" {
			t.Errorf("Principal = %q, %v", p, ok)
		}
		if _, ok := idempotency.Principal(context.Background()); ok {
			t.Error("Principal of a bare context is set")
		}
	})
}

// Only responses of requests that executed are stored (StoreStatus); the
// others reach the client and the retry runs the handler again.
func TestMiddlewareStoresOnlyWhatExecuted(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		notStored := []int{400, 401, 403, 404, 405, 408, 413, 415, 429, 500, 501, 502, 503, 504}
		stored := []int{200, 201, 202, 204, 301, 303, 402, 406, 409, 410, 412, 422}
		for _, code := range append(append([]int{}, notStored...), stored...) {
			want := idempotency.StoreStatus(code)
			if got := !containsInt(notStored, code); got != want {
				t.Errorf("StoreStatus(%d) = %v, want %v", code, want, got)
			}
		}
		var runs, status atomic.Int64
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(counting(&runs, &status))
		for _, code := range notStored {
			key := fmt.Sprintf(`"not-stored-%d"`, code)
			status.Store(int64(code))
			if rec := do(h, post("/v1/orders", key, "{}")); rec.Code != code {
				t.Errorf("%d: first answer %d", code, rec.Code)
			}
			status.Store(http.StatusCreated)
			if rec := do(h, post("/v1/orders", key, "{}")); rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "" {
				t.Errorf("retry after %d: %d replayed=%q; want the handler run again", code, rec.Code, rec.Header().Get("Idempotent-Replayed"))
			}
		}
		for _, code := range stored {
			key := fmt.Sprintf(`"stored-%d"`, code)
			status.Store(int64(code))
			first := do(h, post("/v1/orders", key, "{}"))
			status.Store(http.StatusCreated)
			retry := do(h, post("/v1/orders", key, "{}"))
			if retry.Code != code || retry.Header().Get("Idempotent-Replayed") != "true" || retry.Body.String() != first.Body.String() {
				t.Errorf("retry after %d: %d %q replayed=%q; want the stored answer", code, retry.Code, retry.Body, retry.Header().Get("Idempotent-Replayed"))
			}
			if got := retry.Header().Get("X-Not-Stored"); got != "" {
				t.Errorf("replay of %d carries X-Not-Stored %q: only Content-Type, Location and Retry-After are stored", code, got)
			}
			if got := retry.Header().Get("Content-Type"); got != "text/plain" {
				t.Errorf("replay of %d: Content-Type %q, want text/plain", code, got)
			}
			if got, want := retry.Header().Get("Location"), first.Header().Get("Location"); got != want || want == "" {
				t.Errorf("replay of %d: Location %q, want %q", code, got, want)
			}
			if got := retry.Header().Get("Retry-After"); got != "7" {
				t.Errorf("replay of %d: Retry-After %q, want 7", code, got)
			}
		}
		// A Store of one's own: here, every status is stored.
		all := b.store.Middleware(idempotency.MiddlewareOptions{Store: func(int) bool { return true }})(counting(&runs, &status))
		status.Store(http.StatusServiceUnavailable)
		do(all, post("/v1/orders", `"all"`, "{}"))
		status.Store(http.StatusCreated)
		if rec := do(all, post("/v1/orders", `"all"`, "{}")); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("custom Store: retry %d, want the stored 503", rec.Code)
		}
	})
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Defaults: POST and PATCH only; bodies up to 1 MiB.
func TestMiddlewareDefaults(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusOK)
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(counting(&runs, &status))
		for _, method := range []string{http.MethodPost, http.MethodPatch} {
			for range 2 {
				req := httptest.NewRequest(method, "/v1/orders", strings.NewReader("{}"))
				req.Header.Set("Idempotency-Key", `"m-`+method+`"`)
				do(h, req)
			}
		}
		if got := runs.Load(); got != 2 {
			t.Fatalf("POST and PATCH twice each: %d runs, want 2", got)
		}
		for _, method := range []string{http.MethodPut, http.MethodDelete, http.MethodGet} {
			req := httptest.NewRequest(method, "/v1/orders", nil)
			req.Header.Set("Idempotency-Key", `"m-POST"`)
			if rec := do(h, req); rec.Header().Get("Idempotent-Replayed") != "" {
				t.Errorf("%s was replayed; only POST and PATCH are covered by default", method)
			}
		}
		if got := runs.Load(); got != 5 {
			t.Fatalf("%d runs, want 5: other methods pass through", got)
		}
		if rec := do(h, post("/v1/orders", `"big-ok"`, strings.Repeat("x", 1<<20))); rec.Code != http.StatusOK {
			t.Errorf("a 1 MiB body: %d, want 200", rec.Code)
		}
		if rec := do(h, post("/v1/orders", `"big"`, strings.Repeat("x", 1<<20+1))); rec.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("1 MiB + 1 byte: %d, want 413", rec.Code)
		}
		// Without Required, a request without a key passes through.
		do(h, post("/v1/orders", "", "{}"))
		do(h, post("/v1/orders", "", "{}"))
		if got := runs.Load(); got != 8 {
			t.Fatalf("%d runs, want 8: keyless requests run every time", got)
		}
	})
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		header []string
		want   string // "" for an error
	}{
		{[]string{`"abc"`}, "abc"},
		{[]string{`  "abc"  `}, "abc"},
		{[]string{`"a\"b"`}, `a"b`},
		{[]string{`"a\\b"`}, `a\b`},
		{[]string{`"a b"`}, "a b"},
		{[]string{`"abc";a=1`}, "abc"},
		{[]string{`"abc";a=1;b=?0;c="x";d=:YQ==:;e=1.5;f=tok`}, "abc"},
		{[]string{`" "`}, " "},
		{[]string{`"42"`}, "42"},
		{[]string{`42`}, "\t42"},
		{[]string{`abc`}, "\tabc"},
		{[]string{`-1.5e3`}, "\t-1.5e3"},
		{[]string{`urn:uuid/x`}, "\turn:uuid/x"},
		{[]string{`8e03978e-40d5-43e8-bc93-6894a57f9324`}, "\t8e03978e-40d5-43e8-bc93-6894a57f9324"},
		// Each edge of each range of an unquoted key's characters, and
		// the first of the others: in, and one past.
		{[]string{`a`}, "\ta"}, {[]string{`z`}, "\tz"}, {[]string{`A`}, "\tA"}, {[]string{`Z`}, "\tZ"},
		{[]string{`0`}, "\t0"}, {[]string{`9`}, "\t9"}, {[]string{`!`}, "\t!"}, {[]string{`a!`}, "\ta!"},
		{[]string{`a{`}, ""}, {[]string{`a[`}, ""}, {[]string{`a@`}, ""}, {[]string{`a"`}, ""},
		{[]string{`"` + strings.Repeat("k", 255) + `"`}, strings.Repeat("k", 255)},
		{[]string{strings.Repeat("k", 254)}, "\t" + strings.Repeat("k", 254)},
		{[]string{`"` + strings.Repeat("k", 256) + `"`}, ""},
		{[]string{strings.Repeat("k", 255)}, ""},
		{[]string{`""`}, ""},
		{[]string{``}, ""},
		{[]string{`"a"`, `"b"`}, ""},
		{nil, ""},
		{[]string{`"a", "b"`}, ""},
		{[]string{`"a\x"`}, ""},
		{[]string{`"é"`}, ""},
		{[]string{`:YWJj:`}, ""},
		{[]string{`(a b)`}, ""},
		{[]string{`(`}, ""},
		{[]string{`a=1`}, ""},
		{[]string{`abc;a=1`}, ""},
		{[]string{`?1`}, ""},
		{[]string{`@2026`}, ""},
		{[]string{`%"display"`}, ""},
		{[]string{`"k" "l"`}, ""},
		{[]string{`a b`}, ""},
		{[]string{"a\x00b"}, ""},
	} {
		got, err := idempotency.ParseKey(tc.header)
		if (err != nil) != (tc.want == "") || got != tc.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", tc.header, got, err, tc.want)
		}
	}
	// A key one past its limit is refused with the limit of its form: the
	// 400's detail tells the client what fits.
	for _, tc := range []struct {
		header, limit string
	}{
		{`"` + strings.Repeat("k", idempotency.MaxKeyBytes+1) + `"`, fmt.Sprintf("1 to %d characters", idempotency.MaxKeyBytes)},
		{strings.Repeat("k", idempotency.MaxKeyBytes), fmt.Sprintf("1 to %d characters", idempotency.MaxKeyBytes-1)},
	} {
		if _, err := idempotency.ParseKey([]string{tc.header}); err == nil || !strings.HasSuffix(err.Error(), tc.limit) {
			t.Errorf("ParseKey of %d bytes: %v; want an error naming %q", len(tc.header), err, tc.limit)
		}
	}
}

// A duplicate in flight is a 409 problem with Retry-After in whole
// seconds (the lease: 30 s by default), and is not stored: once the first
// request completes, the retry gets its response.
func TestMiddlewareInFlightIs409WithRetryAfter(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		started, release := make(chan struct{}), make(chan struct{})
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
			w.WriteHeader(http.StatusCreated)
		}))
		first := make(chan *httptest.ResponseRecorder, 1)
		go func() { first <- do(h, post("/v1/orders", `"k"`, "{}")) }()
		<-started
		rec := do(h, post("/v1/orders", `"k"`, "{}"))
		if rec.Code != http.StatusConflict || rec.Header().Get("Retry-After") != "30" || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("in flight: %d Retry-After %q %q; want a 409 problem, Retry-After 30", rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("Content-Type"))
		}
		close(release)
		if rec := <-first; rec.Code != http.StatusCreated {
			t.Fatalf("first: %d", rec.Code)
		}
		if rec := do(h, post("/v1/orders", `"k"`, "{}")); rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry after the first completed: %d, want the replayed 201", rec.Code)
		}
		// A lease of 1.5 s is a Retry-After of 2: whole seconds, rounded up.
		short := idempotency.New(b.db, &idempotency.Options{Lease: 1500 * time.Millisecond})
		started2, release2, done2 := make(chan struct{}), make(chan struct{}), make(chan struct{})
		h2 := short.Middleware(idempotency.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started2)
			<-release2
			w.WriteHeader(http.StatusCreated)
		}))
		go func() { do(h2, post("/v1/orders", `"k2"`, "{}")); close(done2) }()
		<-started2
		defer func() { close(release2); <-done2 }()
		if rec := do(h2, post("/v1/orders", `"k2"`, "{}")); rec.Code != http.StatusConflict || rec.Header().Get("Retry-After") != "2" {
			t.Fatalf("in flight with a 1.5 s lease: %d Retry-After %q; want 409, Retry-After 2", rec.Code, rec.Header().Get("Retry-After"))
		}
	})
}

// The default scope takes any path: a long one, or one with escaped
// bytes that are no text (%00, %FF), is a scope like any other.
func TestMiddlewareDefaultScopeTakesAnyPath(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusCreated)
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(counting(&runs, &status))
		long := "/v1/" + strings.Repeat("a", 600)
		for i, target := range []string{long, long + "b", "/v1/a%00b", "/v1/a%FFb"} {
			for j := range 2 {
				rec := do(h, post(target, `"k"`, "{}"))
				replayed := rec.Header().Get("Idempotent-Replayed") == "true"
				if rec.Code != http.StatusCreated || rec.Body.String() != fmt.Sprintf("run %d", i+1) || replayed != (j == 1) {
					t.Errorf("%.20s…: %d %q replayed=%v", target, rec.Code, rec.Body, replayed)
				}
			}
		}
	})
}

// When the store cannot be reached the answer is a 503 problem with
// Retry-After, and the handler does not run.
func TestMiddlewareStoreUnavailableIs503(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusCreated)
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(counting(&runs, &status))
		if err := b.db.Close(); err != nil {
			t.Fatal(err)
		}
		rec := do(h, post("/v1/orders", `"k"`, "{}"))
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("store closed: %d Retry-After %q; want a 503 problem with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
		}
		if got := runs.Load(); got != 0 {
			t.Fatalf("the handler ran %d times without a store", got)
		}
	})
}

// The default scope keeps a path verbatim up to MaxScopeBytes for the
// whole scope (the caller's 16 hex digits, the method, the path) and
// hashes it one byte past that: the bound is inclusive.
func TestMiddlewareDefaultScopeAtItsBound(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusCreated)
		h := b.store.Middleware(idempotency.MiddlewareOptions{})(counting(&runs, &status))
		prefix := len("0123456789abcdef POST ")
		atBound := "/v1/" + strings.Repeat("a", idempotency.MaxScopeBytes-prefix-len("/v1/"))
		for _, target := range []string{atBound, atBound + "b"} {
			if rec := do(h, post(target, `"k"`, "{}")); rec.Code != http.StatusCreated {
				t.Fatalf("%d bytes of scope: %d %q", prefix+len(target), rec.Code, rec.Body)
			}
		}
		scopes := testdb.Strings(t, b.db, `SELECT scope FROM racefree_idempotency ORDER BY length(scope) DESC`)
		if len(scopes) != 2 || len(scopes[0]) != idempotency.MaxScopeBytes || !strings.HasSuffix(scopes[0], " POST "+atBound) || !strings.Contains(scopes[1], " POST sha256:") {
			t.Fatalf("scopes %q; want the path at the bound kept (%d bytes) and the one past it hashed", scopes, idempotency.MaxScopeBytes)
		}
	})
}
