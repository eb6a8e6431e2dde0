package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/onetime"
)

// tokenRoutes serves one-time codes and refresh-token rotation.
type tokenRoutes struct {
	store *onetime.Store
	err   error                  // a configuration error, answered with 500
	ops   *prometheus.CounterVec // op, outcome
}

func (s *Server) tokenRoutes() {
	s.tokens = &tokenRoutes{ops: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "racefree_token_operations_total",
		Help: "Token operations by op (issue, issue_refresh, consume, rotate) and outcome (ok, consumed, rotated, replayed, already_used, reused, revoked, expired, unknown, invalid, error).",
	}, []string{"op", "outcome"})}
	s.reg.MustRegister(s.tokens.ops)
	s.tokens.store, s.tokens.err = onetime.New(s.db, &onetime.Options{Grace: s.opts.RefreshGrace, Secret: s.opts.RefreshSecret})
	s.handle("POST /v1/tokens", s.tokenBearing(s.issueToken))
	s.handle("POST /v1/tokens/consume", s.transactional(s.consumeToken))
	s.handle("POST /v1/tokens/rotate", s.tokenBearing(s.rotateToken))
}

// ReapTokens deletes every tenant's one-time codes and
// refresh-token families that can no longer be used and expired at least
// grace ago, and counts them in racefree_reaped_rows_total. Serve calls it
// every minute.
func (s *Server) ReapTokens(ctx context.Context, grace time.Duration) (codes, families int64, err error) {
	store, err := s.tokenStore()
	if err != nil {
		return 0, 0, err
	}
	codes, families, err = store.Reap(ctx, grace, 0)
	s.CountReaped("token_codes", codes)
	s.CountReaped("token_families", families)
	return codes, families, err
}

// tokenBearing serves op, whose answer carries a token in clear, in one
// transaction like transactional, but never stores its answer: racefree
// keeps only the hashes of tokens, also in idempotency records. A request
// with an Idempotency-Key is therefore refused (400) before anything runs.
// A lost answer is recovered otherwise: an issue is simply repeated (the
// lost code expires unused), and a rotation retried within the grace
// window gets the same successor back.
func (s *Server) tokenBearing(op operation) http.Handler {
	h := s.transactional(op)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, present := r.Header[idempotency.Header]; present {
			writeProblem(w, problem.InvalidInput.New("this route answers with a token, and racefree never stores a token, so it cannot replay the answer: "+
				"send the request without Idempotency-Key (a rotation retried within the grace window gets the same successor back)"))
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// tokenRefusedError is a refusal that Consume or Rotate decided. It is an
// executed outcome (see executed): the transaction commits, so that a
// family revoked on reuse stays revoked.
type tokenRefusedError struct {
	Outcome onetime.Outcome
}

func (e *tokenRefusedError) Error() string { return "token refused: " + e.Outcome.String() }

func (s *Server) tokenStore() (*onetime.Store, error) {
	if s.tokens.err != nil {
		return nil, fmt.Errorf("token options: %v", s.tokens.err) // a configuration error, not the client's: 500
	}
	return s.tokens.store, nil
}

// tokenTTL converts the required ttl_ms field.
func tokenTTL(ms *int64) (time.Duration, error) {
	if ms == nil {
		return 0, racefree.Invalid("ttl_ms", "is required")
	}
	if *ms < onetime.MinTTL.Milliseconds() || *ms > onetime.MaxTTL.Milliseconds() {
		return 0, racefree.Invalid("ttl_ms", "must be between %d and %d", onetime.MinTTL.Milliseconds(), onetime.MaxTTL.Milliseconds())
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

func (s *Server) countToken(op string, outcome onetime.Outcome, err error) {
	label := "ok"
	switch {
	case errors.Is(err, racefree.ErrInvalidInput):
		label = "invalid"
	case err != nil:
		label = "error"
	case outcome != 0:
		label = outcome.String()
	}
	s.tokens.ops.WithLabelValues(op, label).Inc()
}

// issueRequest is the body of POST /v1/tokens.
type issueRequest struct {
	Kind    *string `json:"kind"`
	Purpose string  `json:"purpose"`
	Subject string  `json:"subject"`
	TTLMs   *int64  `json:"ttl_ms"`
}

// consumeTokenRequest is the body of POST /v1/tokens/consume.
type consumeTokenRequest struct {
	Purpose string `json:"purpose"`
	Token   string `json:"token"`
}

// rotateRequest is the body of POST /v1/tokens/rotate.
type rotateRequest struct {
	Token string `json:"token"`
}

func (s *Server) issueToken(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	var req issueRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	store, err := s.tokenStore()
	if err != nil {
		return nil, err
	}
	ttl, err := tokenTTL(req.TTLMs)
	if err != nil {
		return nil, err
	}
	kind := "code" // the default, when kind is absent
	if req.Kind != nil {
		kind = *req.Kind
	}
	switch kind {
	case "code":
		c, err := store.Issue(ctx, exec, req.Purpose, req.Subject, ttl)
		s.countToken("issue", 0, err)
		if err != nil {
			return nil, err
		}
		return map[string]any{"kind": "code", "token": c.Token, "purpose": c.Purpose, "subject": c.Subject,
			"issued_at": formatTime(c.IssuedAt), "expires_at": formatTime(c.ExpiresAt)}, nil
	case "refresh":
		if req.Purpose != "" {
			return nil, racefree.Invalid("purpose", "is not a field of a refresh token")
		}
		t, err := store.IssueRefresh(ctx, exec, req.Subject, ttl)
		s.countToken("issue_refresh", 0, err)
		if err != nil {
			return nil, err
		}
		return refreshJSON("issued", t), nil
	}
	return nil, racefree.Invalid("kind", `must be "code" or "refresh", got %q`, kind)
}

func refreshJSON(outcome string, t *onetime.Refresh) map[string]any {
	return map[string]any{"kind": "refresh", "outcome": outcome, "token": t.Token, "subject": t.Subject,
		"expires_at": formatTime(t.ExpiresAt), "generation": t.Generation}
}

func (s *Server) consumeToken(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	var req consumeTokenRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	store, err := s.tokenStore()
	if err != nil {
		return nil, err
	}
	red, err := store.Consume(ctx, exec, req.Purpose, req.Token)
	s.countToken("consume", red.Outcome, err)
	if err != nil {
		return nil, err
	}
	if red.Outcome != onetime.Consumed {
		return nil, &tokenRefusedError{Outcome: red.Outcome}
	}
	return map[string]any{"outcome": red.Outcome.String(), "purpose": req.Purpose, "subject": red.Subject,
		"issued_at": formatTime(red.IssuedAt), "expires_at": formatTime(red.ExpiresAt), "used_at": formatTime(red.UsedAt)}, nil
}

func (s *Server) rotateToken(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	var req rotateRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	store, err := s.tokenStore()
	if err != nil {
		return nil, err
	}
	rot, err := store.Rotate(ctx, exec, req.Token)
	s.countToken("rotate", rot.Outcome, err)
	if err != nil {
		return nil, err
	}
	if rot.Next == nil {
		return nil, &tokenRefusedError{Outcome: rot.Outcome}
	}
	return refreshJSON(rot.Outcome.String(), rot.Next), nil
}

// tokenProblem maps a refusal to its problem.
func tokenProblem(e *tokenRefusedError) Problem {
	kind := problem.TokenUnknown
	switch e.Outcome {
	case onetime.AlreadyUsed:
		kind = problem.TokenUsed
	case onetime.Reused:
		kind = problem.TokenReused
	case onetime.Revoked:
		kind = problem.TokenRevoked
	case onetime.Expired:
		kind = problem.TokenExpired
	}
	p := kind.New(tokenDetails[e.Outcome])
	p.Extra = map[string]any{"outcome": e.Outcome.String()}
	return p
}

var tokenDetails = map[onetime.Outcome]string{
	onetime.AlreadyUsed: "this code was redeemed before",
	onetime.Reused:      "this refresh token was already rotated: its whole family is now revoked, sign in again",
	onetime.Revoked:     "this token, or its refresh-token family, is revoked",
	onetime.Expired:     "this token has expired",
	onetime.Unknown:     "no such token (for a code: none of this purpose)",
}
