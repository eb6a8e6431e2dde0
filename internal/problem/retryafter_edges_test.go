package problem_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/racefree/racefree/internal/problem"
)

// TestRetryAfterOnEvery503AndNoOther: every registered kind of status 503
// is written with Retry-After (RetryAfterSeconds, or the caller's own
// when it set one, which is kept); a kind of any other status, which a
// retry does not fix, gets none from Write.
func TestRetryAfterOnEvery503AndNoOther(t *testing.T) {
	t.Parallel()
	for _, k := range problem.Kinds() {
		rec := httptest.NewRecorder()
		problem.Write(rec, k.New("detail"))
		got := rec.Result().Header.Get("Retry-After")
		switch {
		case k.Status == http.StatusServiceUnavailable && got != problem.RetryAfterSeconds:
			t.Errorf("%s (503): Retry-After %q, want %q", k.Name, got, problem.RetryAfterSeconds)
		case k.Status != http.StatusServiceUnavailable && got != "":
			t.Errorf("%s (%d): Retry-After %q, want none", k.Name, k.Status, got)
		}
		if k.Status != http.StatusServiceUnavailable {
			continue
		}
		rec = httptest.NewRecorder()
		rec.Header().Set("Retry-After", "7")
		problem.Write(rec, k.New("detail"))
		if got := rec.Result().Header.Get("Retry-After"); got != "7" {
			t.Errorf("%s with the caller's Retry-After 7: %q, want 7 kept", k.Name, got)
		}
	}
}
