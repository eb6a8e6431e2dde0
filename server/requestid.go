package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"time"

	"github.com/racefree/racefree/internal/problem"
)

// RequestIDHeader is the header that carries a request's id, in and out:
// the server keeps the id a client sends (1 to 128 visible ASCII
// characters) and makes one up otherwise, answers it in the same header,
// puts it in every problem body (request_id) and in every log line of
// the request.
const RequestIDHeader = problem.RequestIDHeader

type requestIDKey struct{}

// requestID returns the id r carries, when it is one, or a new one.
func requestID(r *http.Request) string {
	if v := r.Header.Values(RequestIDHeader); len(v) == 1 && validRequestID(v[0]) {
		return v[0]
	}
	var b [12]byte
	var id [24]byte
	_, _ = rand.Read(b[:])
	hex.Encode(id[:], b[:])
	return string(id[:])
}

func validRequestID(v string) bool {
	if len(v) < 1 || len(v) > 128 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// RequestID returns the id of the request ctx belongs to, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// withRequestID adds the request id of each record's context to every
// record of h.
type withRequestID struct{ slog.Handler }

func (h withRequestID) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h withRequestID) WithAttrs(attrs []slog.Attr) slog.Handler {
	return withRequestID{h.Handler.WithAttrs(attrs)}
}

func (h withRequestID) WithGroup(name string) slog.Handler {
	return withRequestID{h.Handler.WithGroup(name)}
}

// accessLog logs one line per request at Info: method, path, route
// pattern, status, bytes written, duration and request id (ctx's).
func (s *Server) accessLog(ctx context.Context, r *http.Request, route string, rec *statusRecorder, took time.Duration) {
	if !s.log.Enabled(ctx, slog.LevelInfo) {
		return // nothing to format
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "request",
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("route", route),
		slog.Int("status", rec.status), slog.Int64("bytes", rec.bytes), slog.Duration("took", took))
}
