package server

import (
	"context"
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
	s.handle("POST /v1/claims/{key}", s.oneCall(s.acquireClaim))
	s.handle("POST /v1/claims/{key}/renew", s.oneCall(s.renewClaim))
	s.handle("DELETE /v1/claims/{key}", http.HandlerFunc(s.releaseClaim))
	s.handle("GET /v1/claims/{key}", http.HandlerFunc(s.getClaim))
	s.handle("POST /v1/events", s.oneCall(s.observeEvent))
	s.handle("POST /v1/events/{fingerprint}/result", s.transactional(s.recordEvent))
	s.handle("GET /v1/events/{fingerprint}", http.HandlerFunc(s.getEvent))
}

// claimJSON is a claim as the routes answer it, the OpenAPI document's
// Claim: key, holder, fence, claimed_at, expires_at, live, count,
// first_seen, last_seen, its times in timeFormat ("" for none). It writes
// itself (appendJSON) byte for byte as encoding/json writes the struct of
// those fields, without reflection or a string per time;
// TestClaimJSONIsWhatEncodingJSONWrites holds it to that.
type claimJSON struct{ c *claim.Claim }

func toClaimJSON(c *claim.Claim) claimJSON { return claimJSON{c} }

func (j claimJSON) MarshalJSON() ([]byte, error) { return j.appendJSON(nil), nil }

func (j claimJSON) appendJSON(b []byte) []byte {
	c := j.c
	b = append(b, `{"key":`...)
	b = appendJSONString(b, c.Key)
	b = append(b, `,"holder":`...)
	b = appendJSONString(b, c.Holder)
	b = append(b, `,"fence":`...)
	b = strconv.AppendInt(b, c.Fence, 10)
	b = append(b, `,"claimed_at":`...)
	b = appendJSONTime(b, c.ClaimedAt)
	b = append(b, `,"expires_at":`...)
	b = appendJSONTime(b, c.ExpiresAt)
	b = append(b, `,"live":`...)
	b = strconv.AppendBool(b, c.Live)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, c.Count, 10)
	b = append(b, `,"first_seen":`...)
	b = appendJSONTime(b, c.FirstSeen)
	b = append(b, `,"last_seen":`...)
	b = appendJSONTime(b, c.LastSeen)
	return append(b, '}')
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

// claimKey returns the path's claim key: 1 to [claim.MaxKeyBytes] bytes of
// UTF-8 without a NUL byte, matching pathValuePattern.
func claimKey(r *http.Request) (string, error) { return pathParam(r, "key", claim.MaxKeyBytes) }

// acquireRequest is the body of POST /v1/claims/{key}.
type acquireRequest struct {
	Holder string `json:"holder"`
	TTLMs  *int64 `json:"ttl_ms"`
}

// renewRequest is the body of POST /v1/claims/{key}/renew.
type renewRequest struct {
	Holder string `json:"holder"`
	Fence  *int64 `json:"fence"`
	TTLMs  *int64 `json:"ttl_ms"`
}

// observeRequest is the body of POST /v1/events.
type observeRequest struct {
	Source      string `json:"source"`
	Level       string `json:"level"`
	Message     string `json:"message"`
	Fingerprint string `json:"fingerprint"`
	WindowMs    *int64 `json:"window_ms"`
}

// recordRequest is the body of POST /v1/events/{fingerprint}/result.
type recordRequest struct {
	Fence          *int64 `json:"fence"`
	Classification string `json:"classification"`
	ExternalID     string `json:"external_id"`
}

func (s *Server) acquireClaim(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	var req acquireRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	key, err := claimKey(r)
	if err != nil {
		return nil, err
	}
	if err := noNUL("holder", req.Holder); err != nil {
		return nil, err
	}
	ttl, err := durationFrom("ttl_ms", req.TTLMs)
	if err != nil {
		return nil, err
	}
	c, err := s.claims.Acquire(ctx, exec, key, req.Holder, ttl)
	s.metrics.claim("acquire", err)
	if err != nil {
		return nil, err
	}
	return toClaimJSON(c), nil
}

func (s *Server) renewClaim(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	var req renewRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	key, err := claimKey(r)
	if err != nil {
		return nil, err
	}
	if err := noNUL("holder", req.Holder); err != nil {
		return nil, err
	}
	if err := positiveFence(req.Fence); err != nil {
		return nil, err
	}
	ttl, err := durationFrom("ttl_ms", req.TTLMs)
	if err != nil {
		return nil, err
	}
	c, err := s.claims.Renew(ctx, exec, key, req.Holder, *req.Fence, ttl)
	s.metrics.claim("renew", err)
	if err != nil {
		return nil, err
	}
	return toClaimJSON(c), nil
}

func (s *Server) releaseClaim(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key, err := claimKey(r)
	if err == nil {
		err = noNUL("holder", q.Get("holder"))
	}
	fence, perr := strconv.ParseInt(q.Get("fence"), 10, 64)
	if err == nil && perr != nil {
		err = racefree.Invalid("fence", "query parameter must be an integer")
	}
	if err == nil {
		err = positiveFence(&fence)
	}
	if err == nil {
		// One call whose decision commits on its own: on the pool, as
		// oneCall runs acquire and renew.
		err = s.claims.Release(r.Context(), s.db, key, q.Get("holder"), fence)
		s.metrics.claim("release", err)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getClaim(w http.ResponseWriter, r *http.Request) {
	key, err := claimKey(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var c *claim.Claim
	err = s.reading(r.Context(), func(ctx context.Context, exec racefree.Executor) (err error) {
		c, err = s.claims.Get(ctx, exec, key)
		return err
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toClaimJSON(c))
}

func (s *Server) observeEvent(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	var req observeRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	for _, f := range [][2]string{{"source", req.Source}, {"level", req.Level}, {"message", req.Message}, {"fingerprint", req.Fingerprint}} {
		if err := noNUL(f[0], f[1]); err != nil {
			return nil, err
		}
	}
	var window time.Duration
	if req.WindowMs != nil {
		var err error
		if window, err = durationFrom("window_ms", req.WindowMs); err != nil {
			return nil, err
		}
	}
	o, err := s.events.Observe(ctx, exec, dedup.Event{Source: req.Source, Level: req.Level, Message: req.Message, Fingerprint: req.Fingerprint}, window)
	if err != nil {
		return nil, err
	}
	s.metrics.observation(o.Process)
	return map[string]any{
		"fingerprint": o.Fingerprint, "process": o.Process, "fence": o.Fence, "count": o.Count,
		"first_seen": formatTime(o.FirstSeen), "last_seen": formatTime(o.LastSeen),
	}, nil
}

// eventJSON is the answer of GET /v1/events/{fingerprint}: [dedup.Record].
type eventJSON struct {
	Fingerprint    string `json:"fingerprint"`
	Source         string `json:"source"`
	Level          string `json:"level"`
	Message        string `json:"message"`
	Classification string `json:"classification"`
	ExternalID     string `json:"external_id"`
	ResultFence    int64  `json:"result_fence"` // 0: no result recorded
}

// getEvent answers the request's tenant's stored event and its recorded
// result, as [dedup.Log.Get]: 404 for a fingerprint never observed, or
// reaped.
func (s *Server) getEvent(w http.ResponseWriter, r *http.Request) {
	fp, err := pathParam(r, "fingerprint", claim.MaxKeyBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var rec *dedup.Record
	err = s.reading(r.Context(), func(ctx context.Context, exec racefree.Executor) (err error) {
		rec, err = s.events.Get(ctx, exec, fp)
		return err
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, eventJSON{Fingerprint: rec.Fingerprint, Source: rec.Source, Level: rec.Level, Message: rec.Message,
		Classification: rec.Classification, ExternalID: rec.ExternalID, ResultFence: rec.ResultFence})
}

func (s *Server) recordEvent(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	var req recordRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	fp, err := pathParam(r, "fingerprint", claim.MaxKeyBytes)
	if err != nil {
		return nil, err
	}
	for _, f := range [][2]string{{"classification", req.Classification}, {"external_id", req.ExternalID}} {
		if err := noNUL(f[0], f[1]); err != nil {
			return nil, err
		}
	}
	if err := positiveFence(req.Fence); err != nil {
		return nil, err
	}
	err = s.events.Record(ctx, exec, fp, *req.Fence, dedup.Result{Classification: req.Classification, ExternalID: req.ExternalID})
	s.metrics.claim("record", err)
	if err != nil {
		return nil, err
	}
	return map[string]any{"fingerprint": fp, "fence": *req.Fence,
		"classification": req.Classification, "external_id": req.ExternalID}, nil
}
