package server

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
)

// timeFormat is RFC 3339 in UTC with milliseconds, for every time in a
// response.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeFormat)
}

func (s *Server) claimRoutes() {
	s.mux.Handle("POST /v1/claims/{key}", s.idempotent(s.acquireClaim))
	s.mux.Handle("POST /v1/claims/{key}/renew", s.idempotent(s.renewClaim))
	s.mux.HandleFunc("DELETE /v1/claims/{key}", s.releaseClaim)
	s.mux.HandleFunc("GET /v1/claims/{key}", s.getClaim)
	s.mux.Handle("POST /v1/events", s.idempotent(s.observeEvent))
	s.mux.Handle("POST /v1/events/{fingerprint}/result", s.idempotent(s.recordEvent))
}

type claimJSON struct {
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	Fence     int64  `json:"fence"`
	ClaimedAt string `json:"claimed_at"`
	ExpiresAt string `json:"expires_at"`
	Live      bool   `json:"live"`
	Count     int64  `json:"count"`
	FirstSeen string `json:"first_seen"`
	LastSeen  string `json:"last_seen"`
}

func toClaimJSON(c *claim.Claim) claimJSON {
	return claimJSON{Key: c.Key, Holder: c.Holder, Fence: c.Fence, ClaimedAt: formatTime(c.ClaimedAt),
		ExpiresAt: formatTime(c.ExpiresAt), Live: c.Live, Count: c.Count,
		FirstSeen: formatTime(c.FirstSeen), LastSeen: formatTime(c.LastSeen)}
}

// durationFrom converts a required milliseconds field within the claim
// TTL limits.
func durationFrom(field string, ms *int64) (time.Duration, error) {
	if ms == nil {
		return 0, racefree.Invalid(field, "is required")
	}
	if *ms < claim.MinTTL.Milliseconds() || *ms > claim.MaxTTL.Milliseconds() {
		return 0, racefree.Invalid(field, "must be between %d and %d", claim.MinTTL.Milliseconds(), claim.MaxTTL.Milliseconds())
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

func (s *Server) acquireClaim(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Holder string `json:"holder"`
		TTLMs  *int64 `json:"ttl_ms"`
	}
	if !decode(w, r, &req) {
		return
	}
	ttl, err := durationFrom("ttl_ms", req.TTLMs)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := s.claims.Acquire(r.Context(), s.db, r.PathValue("key"), req.Holder, ttl)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toClaimJSON(c))
}

func (s *Server) renewClaim(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Holder string `json:"holder"`
		Fence  *int64 `json:"fence"`
		TTLMs  *int64 `json:"ttl_ms"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.Fence == nil {
		s.writeError(w, r, racefree.Invalid("fence", "is required"))
		return
	}
	ttl, err := durationFrom("ttl_ms", req.TTLMs)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := s.claims.Renew(r.Context(), s.db, r.PathValue("key"), req.Holder, *req.Fence, ttl)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toClaimJSON(c))
}

func (s *Server) releaseClaim(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fence, err := strconv.ParseInt(q.Get("fence"), 10, 64)
	if err != nil {
		s.writeError(w, r, racefree.Invalid("fence", "query parameter must be an integer"))
		return
	}
	if err := s.claims.Release(r.Context(), s.db, r.PathValue("key"), q.Get("holder"), fence); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getClaim(w http.ResponseWriter, r *http.Request) {
	c, err := s.claims.Get(r.Context(), s.db, r.PathValue("key"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toClaimJSON(c))
}

func (s *Server) observeEvent(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Source      string `json:"source"`
		Level       string `json:"level"`
		Message     string `json:"message"`
		Fingerprint string `json:"fingerprint"`
		WindowMs    *int64 `json:"window_ms"`
	}
	if !decode(w, r, &req) {
		return
	}
	var window time.Duration
	if req.WindowMs != nil {
		var err error
		if window, err = durationFrom("window_ms", req.WindowMs); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	o, err := s.events.Observe(r.Context(), s.db, dedup.Event{Source: req.Source, Level: req.Level, Message: req.Message, Fingerprint: req.Fingerprint}, window)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"fingerprint": o.Fingerprint, "process": o.Process, "fence": o.Fence, "count": o.Count,
		"first_seen": formatTime(o.FirstSeen), "last_seen": formatTime(o.LastSeen),
	})
}

func (s *Server) recordEvent(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Fence          *int64 `json:"fence"`
		Classification string `json:"classification"`
		ExternalID     string `json:"external_id"`
	}
	if !decode(w, r, &req) {
		return
	}
	if req.Fence == nil {
		s.writeError(w, r, racefree.Invalid("fence", "is required"))
		return
	}
	fp := r.PathValue("fingerprint")
	if err := s.events.Record(r.Context(), s.db, fp, *req.Fence, dedup.Result{Classification: req.Classification, ExternalID: req.ExternalID}); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"fingerprint": fp, "fence": *req.Fence,
		"classification": req.Classification, "external_id": req.ExternalID})
}

// heldProblem describes a live claim held by someone else.
func heldProblem(err error) (Problem, bool) {
	var held *claim.HeldError
	if !errors.As(err, &held) {
		return Problem{}, false
	}
	return Problem{Type: ProblemType("held"), Title: "Held by another holder", Status: http.StatusConflict, Detail: held.Error(),
		Extra: map[string]any{"holder": held.Claim.Holder, "fence": held.Claim.Fence, "expires_at": formatTime(held.Claim.ExpiresAt)}}, true
}
