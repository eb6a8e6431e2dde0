package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/racefree/racefree/idempotency"
)

// TestMiddlewareInformationalAnswersPassThrough: a handler that sends two
// 103 Early Hints before its 201 has them reach the client as they were
// sent, each with the handler's Link headers of that moment, and its 201
// with the body answered, stored and replayed: the 1xx are not the
// response. The final answer carries the headers the handler left (not
// the Link it deleted after its hints), and the replay sends no hint.
func TestMiddlewareInformationalAnswersPassThrough(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs atomic.Int64
		h := b.store.Middleware(idempotency.MiddlewareOptions{Headers: []string{"Content-Type", "Location", "Link"}})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			w.Header().Set("Link", "</style.css>; rel=preload; as=style")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Add("Link", "</app.js>; rel=preload; as=script")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", fmt.Sprintf("/v1/orders/%d", n))
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"run":%d}`, n)
		}))
		srv := httptest.NewServer(h)
		defer srv.Close()
		send := func() (hints []string, resp *http.Response, body string) {
			t.Helper()
			trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
				hints = append(hints, fmt.Sprint(code, " ", http.Header(header).Values("Link")))
				return nil
			}}
			req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, srv.URL+"/v1/orders", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Idempotency-Key", `"k"`)
			resp, err = srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			return hints, resp, string(raw)
		}
		hints, resp, body := send()
		wantHints := fmt.Sprint([]string{
			"103 [</style.css>; rel=preload; as=style]",
			"103 [</style.css>; rel=preload; as=style </app.js>; rel=preload; as=script]",
		})
		if fmt.Sprint(hints) != wantHints {
			t.Errorf("the first answer's informational responses: %q, want %s", hints, wantHints)
		}
		if resp.StatusCode != http.StatusCreated || body != `{"run":1}` || resp.Header.Get("Location") != "/v1/orders/1" || resp.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("the first answer: %d %q, Location %q, Idempotent-Replayed %q; want the handler's 201", resp.StatusCode, body, resp.Header.Get("Location"), resp.Header.Get("Idempotent-Replayed"))
		}
		if got := resp.Header.Values("Link"); len(got) != 0 {
			t.Errorf("the first answer carries the Link %q the handler deleted after its hints", got)
		}
		hints, resp, body = send()
		if len(hints) != 0 {
			t.Errorf("the replay sent informational responses %q, want none", hints)
		}
		if resp.StatusCode != http.StatusCreated || body != `{"run":1}` || resp.Header.Get("Location") != "/v1/orders/1" || resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("the replay: %d %q, Location %q, Idempotent-Replayed %q; want the 201 of run 1 replayed", resp.StatusCode, body, resp.Header.Get("Location"), resp.Header.Get("Idempotent-Replayed"))
		}
		if rec := do(h, post("/v1/orders", `"k"`, "{}")); rec.Code != http.StatusCreated || rec.Body.String() != `{"run":1}` {
			t.Errorf("the replay through a recorder: %d %q, want the 201 of run 1", rec.Code, rec.Body.String())
		}
		if got := runs.Load(); got != 1 {
			t.Errorf("the handler ran %d times, want once", got)
		}
	})
}

// TestMiddlewareFingerprintReadsTheEscapedPath: behind a Scope shared by
// every route, /v1/files/a%2Fb and /v1/files/a/b (one path once decoded,
// two resources as sent) with the same key are two requests: the second
// is a 422, not the first's answer replayed. The first retried as sent
// is a replay.
func TestMiddlewareFingerprintReadsTheEscapedPath(t *testing.T) {
	t.Parallel()
	each(t, nil, func(t *testing.T, b bundle) {
		var runs, status atomic.Int64
		status.Store(http.StatusCreated)
		h := b.store.Middleware(idempotency.MiddlewareOptions{Scope: func(*http.Request) string { return "one" }})(counting(&runs, &status))
		if rec := do(h, post("/v1/files/a%2Fb", `"k"`, "{}")); rec.Code != http.StatusCreated || rec.Body.String() != "run 1" {
			t.Fatalf("/v1/files/a%%2Fb: %d %q, want 201", rec.Code, rec.Body.String())
		}
		if rec := do(h, post("/v1/files/a/b", `"k"`, "{}")); rec.Code != http.StatusUnprocessableEntity {
			t.Errorf("/v1/files/a/b with the key of /v1/files/a%%2Fb: %d %q, replayed %q; want 422",
				rec.Code, rec.Body.String(), rec.Header().Get("Idempotent-Replayed"))
		}
		if rec := do(h, post("/v1/files/a%2Fb", `"k"`, "{}")); rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "true" || rec.Body.String() != "run 1" {
			t.Errorf("/v1/files/a%%2Fb retried: %d %q, replayed %q; want the replay of run 1",
				rec.Code, rec.Body.String(), rec.Header().Get("Idempotent-Replayed"))
		}
		if got := runs.Load(); got != 1 {
			t.Errorf("the handler ran %d times, want once", got)
		}
	})
}
