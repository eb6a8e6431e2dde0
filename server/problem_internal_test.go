package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestOneErrorMapping checks problemFor, the one mapping every route
// answers errors with, sentinel by sentinel.
func TestOneErrorMapping(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	s := New(db, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	r := httptest.NewRequest("GET", "/", nil)
	for _, c := range []struct {
		err    error
		status int
		kind   string
	}{
		{racefree.Invalid("key", "bad"), 400, "invalid-input"},
		{&http.MaxBytesError{Limit: 1}, 413, "too-large"},
		{&mediaTypeError{got: "text/plain"}, 415, "unsupported-media-type"},
		{fmt.Errorf("get: %w", racefree.ErrNotFound), 404, "not-found"},
		{&claim.HeldError{}, 409, "held"},
		{&claim.StaleFenceError{Fence: 1, Current: 2}, 409, "stale-fence"},
		{racefree.ErrNotHeld, 409, "not-held"},
		{&idempotency.InProgressError{}, 409, "idempotency-in-progress"},
		{racefree.ErrMismatch, 422, "idempotency-key-mismatch"},
		{&racefree.SchemaError{Have: 1, Want: 2}, 503, "schema"},
		{fmt.Errorf("x: %w", racefree.ErrUnavailable), 503, "unavailable"},
		{fmt.Errorf("x: %w", racefree.ErrRetryable), 503, "unavailable"},
		{context.DeadlineExceeded, 503, "unavailable"},
		{errors.New("something else"), 500, "internal"},
	} {
		p := s.problemFor(r, c.err)
		if p.Status != c.status || p.Type != "urn:racefree:problem:"+c.kind {
			t.Errorf("%v: %d %s, want %d %s", c.err, p.Status, p.Type, c.status, c.kind)
		}
	}
	if p := s.problemFor(r, errors.New("secret detail")); p.Detail != "" {
		t.Errorf("a 500 shows %q", p.Detail)
	}
}
