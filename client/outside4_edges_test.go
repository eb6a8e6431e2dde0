package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/server"
)

// reshaped is a proxy in front of a real server that passes every request
// on and, when the server answers 2xx, sends body under contentType with
// a 200 instead of the server's reply: a gateway's page or JSON of another
// shape, where the server did the work. It counts the requests the server
// served.
type reshaped struct {
	h           http.Handler
	contentType string
	body        []byte

	mu     sync.Mutex
	served int
}

func (p *reshaped) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.served++
	p.mu.Unlock()
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, r)
	if rec.Code/100 != 2 {
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return
	}
	w.Header().Set("Content-Type", p.contentType)
	w.Header().Set("X-Request-Id", "gateway-9")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(p.body)
}

func (p *reshaped) requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.served
}

// raw answers on the bare connection with head (a status line and
// headers, each ending in CRLF, the blank line after them included) and
// body, then closes it: a reply framed as no net/http server frames one.
func raw(head, body string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString(head + body)
		_ = buf.Flush()
	}
}

// TestOutsideAWholeReplyThatDoesNotDecodeIsNotRetried: a 2xx reply that
// arrived whole but is not the route's answer (a gateway's HTML page, JSON
// of another shape, a close-delimited page) is a *client.DecodeError after
// exactly one request, which the server served: never retried (IssueCode,
// sent without an Idempotency-Key, would issue a second code), never an
// *UnreachableError, and matching neither client.ErrUnreachable nor
// racefree.ErrUnavailable; it carries the status, the Content-Type, the
// X-Request-Id and at most 256 bytes of the body, and unwraps to the
// decoder's error. A reply cut short while it was read stays a lost reply,
// retried: one whose Content-Length is not reached, a chunked one cut
// mid-chunk, and one of no declared length whose JSON ends early or which
// ends right after its headers.
func TestOutsideAWholeReplyThatDoesNotDecodeIsNotRetried(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		h := server.New(db, server.Options{Token: "secret"}).Handler()
		start := func(p *reshaped) *client.Client {
			p.h = h
			srv := httptest.NewServer(p)
			t.Cleanup(srv.Close)
			c, err := client.New(srv.URL, &client.Options{Key: "secret", Attempts: 3, Backoff: time.Millisecond, MaxBackoff: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		check := func(t *testing.T, what string, err error, p *reshaped, contentType string) *client.DecodeError {
			t.Helper()
			var de *client.DecodeError
			var u *client.UnreachableError
			if !errors.As(err, &de) || p.requests() != 1 || errors.As(err, &u) || errors.Is(err, client.ErrUnreachable) || errors.Is(err, racefree.ErrUnavailable) {
				t.Fatalf("%s: %v after %d requests; want a *client.DecodeError after exactly 1, neither unreachable nor unavailable", what, err, p.requests())
			}
			if de.Status != http.StatusOK || de.ContentType != contentType || de.RequestID != "gateway-9" || len(de.Body) > 256 || !strings.HasPrefix(string(p.body), de.Body) || de.Body == "" || de.Err == nil {
				t.Fatalf("%s: %+v; want status 200, Content-Type %q, request gateway-9 and the body's first bytes, at most 256", what, de, contentType)
			}
			return de
		}

		t.Run("a gateway's page", func(t *testing.T) {
			page := "<html><head><title>OK</title></head><body>" + strings.Repeat("Your request was accepted. ", 400) + "</body></html>"
			p := &reshaped{contentType: "text/html; charset=utf-8", body: []byte(page)}
			_, err := start(p).IssueCode(ctx, "verify", "u1", time.Hour)
			de := check(t, "IssueCode answered by a 200 page", err, p, "text/html; charset=utf-8")
			if len(de.Body) != 256 || !strings.Contains(err.Error(), "<html>") || !strings.Contains(err.Error(), "gateway-9") {
				t.Fatalf("a page of %d bytes: Body of %d bytes, %q; want its first 256 and the message naming the page and the request", len(page), len(de.Body), err)
			}
		})

		t.Run("JSON of another shape", func(t *testing.T) {
			p := &reshaped{contentType: "application/json", body: []byte(`{"key":"job","holder":["w1"],"fence":"one"}`)}
			_, err := start(p).Acquire(ctx, "job", "w1", time.Minute)
			de := check(t, "Acquire answered by JSON of another shape", err, p, "application/json")
			var te *json.UnmarshalTypeError
			if !errors.As(err, &te) || !errors.As(de.Err, &te) {
				t.Fatalf("%v; want it to unwrap to the decoder's *json.UnmarshalTypeError", err)
			}
			if cl, err := claim.New(db).Get(ctx, db, "job"); err != nil || cl.Holder != "w1" || cl.Fence != 1 || !cl.Live {
				t.Fatalf("the library's claim after the undecodable reply: %+v, %v; want w1's, fence 1: the server did the work, once", cl, err)
			}
		})

		t.Run("an empty 200", func(t *testing.T) {
			p := &reshaped{contentType: "application/json", body: []byte(" ")}
			_, err := start(p).Enqueue(ctx, outbox.Message{Topic: "empty"})
			check(t, "Enqueue answered by a blank 200", err, p, "application/json")
		})

		// Cut short while it was read: a lost reply, retried, and the
		// retry's answer is the server's.
		for _, c := range []struct {
			name   string
			answer func(http.ResponseWriter)
		}{
			{"Content-Length not reached", raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", `{"key":"held","holder":"nob`)},
			{"chunked, cut mid-chunk", raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", "40\r\n{\"key\":\"held\",\"holder\":\"nob")},
			{"no declared length, JSON ending early", raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n", `{"key":"held","holder":"nob`)},
			{"no declared length, no body", raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n", "")},
		} {
			t.Run("cut short: "+c.name, func(t *testing.T) {
				if _, err := claim.New(db).Acquire(ctx, db, "held", "someone", time.Hour); err != nil && !errors.Is(err, racefree.ErrHeld) {
					t.Fatal(err)
				}
				cl, f, _ := outsideClient(t, h, c.answer, 1, client.Options{})
				got, err := cl.Get(ctx, "held")
				if err != nil || got.Holder != "someone" || f.requests() != 2 {
					t.Fatalf("a reply cut short (%s): %+v, %v after %d requests; want the claim from the retry, after 2", c.name, got, err, f.requests())
				}
			})
		}

		// A whole page of no declared length is a reply all the same.
		t.Run("a close-delimited page", func(t *testing.T) {
			page := "<html><body>OK</body></html>"
			cl, f, _ := outsideClient(t, h, raw("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n", page), 1, client.Options{})
			_, err := cl.Get(ctx, "held")
			var de *client.DecodeError
			if !errors.As(err, &de) || f.requests() != 1 || de.Body != page || errors.Is(err, client.ErrUnreachable) {
				t.Fatalf("a whole page ended by the connection's close: %v after %d requests; want a *client.DecodeError holding it after 1", err, f.requests())
			}
		})
	})
}

// TestOutsideAReplyPastTheClientsBound: a 2xx reply longer than the 64
// MiB the client reads is a *client.DecodeError saying so after one
// request, not JSON that "ends early" and not a lost reply retried. The
// server writes it from one small buffer, so that the test holds only
// what the client reads.
func TestOutsideAReplyPastTheClientsBound(t *testing.T) {
	t.Parallel()
	const bound = 64 << 20
	head, tail, chunk := []byte(`{"key":"held","holder":"`), []byte(`"}`), bytes.Repeat([]byte("a"), 1<<20)
	size := len(head) + bound + len(tail)
	var mu sync.Mutex
	served := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(head)
		for range bound / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = w.Write(tail)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, &client.Options{Key: "secret", Attempts: 3, Backoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(context.Background(), "held")
	mu.Lock()
	defer mu.Unlock()
	var de *client.DecodeError
	if !errors.As(err, &de) || served != 1 || !strings.Contains(err.Error(), "longer than 67108864 bytes") || len(de.Body) != 256 {
		t.Fatalf("a reply of %d bytes: %v after %d requests; want a *client.DecodeError saying it is longer than 64 MiB, after 1", size, err, served)
	}
}

// TestOutsideDeadRefusesItsLimitBeforeAnyRequest: Dead refuses a limit
// below 0 or past outbox.MaxPage as Entries and InboxEvents refuse theirs:
// a *racefree.InputError of field limit, before any request; a limit of
// exactly outbox.MaxPage, and 0 (the server's default), are asked for.
func TestOutsideDeadRefusesItsLimitBeforeAnyRequest(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := server.New(db, server.Options{Token: "secret"})
		c, f, _ := outsideClient(t, s.Handler(), nil, 0, client.Options{})
		o, err := s.Outbox()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(ctx, outbox.Message{Topic: "mail", MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		ds, err := o.Claim(ctx, "w", 1, time.Hour, "mail")
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim: %v, %v", ds, err)
		}
		if _, err := o.Fail(ctx, ds[0], outbox.Permanent(errors.New("refused"))); err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{outbox.MaxPage, 0} {
			if rs, err := c.Dead(ctx, outbox.Filter{}, 0, limit); err != nil || len(rs) != 1 {
				t.Fatalf("dead with a limit of %d: %+v, %v; want the one dead letter", limit, rs, err)
			}
		}
		for _, limit := range []int{-1, outbox.MaxPage + 1} {
			before := f.requests()
			rs, err := c.Dead(ctx, outbox.Filter{}, 0, limit)
			var ie *racefree.InputError
			if !errors.As(err, &ie) || ie.Field != "limit" || f.requests() != before {
				t.Fatalf("dead with a limit of %d: %+v, %v after %d requests; want an InputError of field limit and none", limit, rs, err, f.requests()-before)
			}
		}
	})
}
