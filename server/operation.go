package server

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/tenant"
)

// operation is one of racefree's own state-changing routes. All its
// effects are database writes through exec, so that they commit or roll
// back with whatever else exec carries. It returns the 200 response, or an
// error that problemFor maps.
type operation func(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error)

// response is an answer as an Idempotency-Key stores and replays it: its
// status, the headers of its own (an answer's or headerError's; a record
// stored before they were kept has none) and its body.
type response struct {
	Status int             `json:"status"`
	Header http.Header     `json:"header,omitempty"`
	Body   json.RawMessage `json:"body"`
}

// answer is an operation's 200 body with the response headers that belong
// to it (the quota route's RateLimit fields). It encodes as its body;
// under an Idempotency-Key its headers are stored with it and replayed.
type answer struct {
	body   any
	header http.Header
}

func (a answer) MarshalJSON() ([]byte, error) { return json.Marshal(a.body) }

// headerError is an operation's error with the response headers its
// problem carries (a quota denial's RateLimit fields). writeError sends
// them; stored keeps them when the outcome is stored.
type headerError struct {
	error
	header http.Header
}

func (e *headerError) Unwrap() error { return e.error }

// headerOf returns the headers of an operation's answer v or error err.
func headerOf(v any, err error) http.Header {
	if he := (*headerError)(nil); err != nil && errors.As(err, &he) { // no errors.As (and its allocation) on success
		return he.header
	}
	if a, ok := v.(answer); ok && err == nil {
		return a.header
	}
	return nil
}

// setHeader copies h into w's headers.
func setHeader(w http.ResponseWriter, h http.Header) {
	for k, v := range h {
		w.Header()[k] = v
	}
}

// executed reports whether err is an outcome the operation decided (a
// claim held by another, a stale fence: 409), which is stored and replayed
// like a success, rather than a request refused before it ran (bad input,
// an unknown fingerprint) or a failure (an outage), after which the retry
// must run again. It keeps [idempotency.StoreStatus]'s rule.
func executed(err error) bool {
	var tr *tokenRefusedError
	return err == nil || errors.Is(err, racefree.ErrHeld) || errors.Is(err, racefree.ErrNotHeld) ||
		errors.Is(err, racefree.ErrStaleFence) ||
		errors.As(err, &tr) && tr.Outcome != onetime.Unknown // a revocation on reuse must commit
}

// transactional serves op in one transaction of the request's tenant
// ([tenant.InTx]: on PostgreSQL row-level security binds every statement to
// it). With an Idempotency-Key, the
// operation, the key's record and the stored response commit together
// (idempotency.DoTx): a crash or a lost connection between the operation
// and the stored response rolls both back, so the retry runs the operation
// once more instead of finding it done and unrecorded. Outcomes the
// operation decided are stored and replayed with Idempotent-Replayed:
// true; bad input and failures store nothing.
func (s *Server) transactional(op operation) http.Handler { return s.serveOperation(op, false) }

// oneCall serves op, which is one call of a primitive whose decision
// commits on its own (a claim's acquire or renew, an event's observation),
// as transactional does
// with an Idempotency-Key; without one, on the pool: one round trip on
// PostgreSQL (the tenant's setting travels with the statement), a
// prepared statement on SQLite, and, with Config.Combine, a batch with
// concurrent calls, which a transaction of the request's own would bypass.
func (s *Server) oneCall(op operation) http.Handler { return s.serveOperation(op, true) }

// serveOperation serves op as transactional, or as oneCall when pooled.
func (s *Server) serveOperation(op operation, pooled bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(w, r)
		if err == nil {
			err = jsonBody(r)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		raw, present := r.Header[idempotency.Header]
		var key string
		if present {
			if key, err = idempotency.ParseKey(raw); err != nil {
				writeProblem(w, problem.IdempotencyMalformed.New(err.Error()))
				return
			}
		}
		ctx := r.Context()
		if !present && pooled {
			v, err := op(ctx, s.db, r, body)
			s.respond(w, r, v, err)
			return
		}
		if !present {
			var (
				v     any
				opErr error
			)
			err := tenant.InTx(ctx, s.db, tenant.From(ctx), func(ctx context.Context, tx *sql.Tx) error {
				v, opErr = op(ctx, tx, r, body)
				if executed(opErr) {
					return nil // commit what the operation decided, such as a counted attempt
				}
				return opErr
			})
			if err == nil {
				err = opErr
			}
			s.respond(w, r, v, err)
			return
		}
		scope, fingerprint := idempotency.DefaultScope(r), idempotency.Fingerprint(r, body)
		var res *idempotency.Result
		err = tenant.InTx(ctx, s.db, tenant.From(ctx), func(ctx context.Context, tx *sql.Tx) (err error) {
			res, err = s.idem.DoTx(ctx, tx, scope, key, fingerprint, func(ctx context.Context, tx *sql.Tx, _ *idempotency.Call) ([]byte, error) {
				v, err := op(ctx, tx, r, body)
				if !executed(err) {
					return nil, err
				}
				return s.stored(r, v, err)
			})
			return err
		})
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		var resp response
		if err := json.Unmarshal(res.Response, &resp); err != nil {
			s.writeError(w, r, err)
			return
		}
		setHeader(w, resp.Header)
		if res.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.Header().Set("Cache-Control", "no-store")
		ct := "application/json"
		if resp.Status >= 400 {
			ct = "application/problem+json"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
	})
}

// stored returns the response of an executed operation, as stored.
func (s *Server) stored(r *http.Request, v any, err error) ([]byte, error) {
	resp := response{Status: http.StatusOK, Header: headerOf(v, err)}
	var body any = v
	if err != nil {
		p := s.problemFor(r, err)
		resp.Status, body = p.Status, p
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	resp.Body = append(raw, '\n')
	return json.Marshal(resp)
}

func (s *Server) respond(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	setHeader(w, headerOf(v, nil))
	writeJSON(w, http.StatusOK, v)
}

// reading runs fn, a read route's database work, for the request's
// tenant and writes nothing ([tenant.ReadTx]): on PostgreSQL in a READ ONLY
// transaction set to the tenant, so that row-level security binds it and
// it works on a standby; on SQLite on the pool (every racefree statement
// filters by the tenant there), so that a read never takes SQLite's
// write lock.
func (s *Server) reading(ctx context.Context, fn func(ctx context.Context, exec racefree.Executor) error) error {
	return tenant.ReadTx(ctx, s.db, tenant.From(ctx), fn)
}

// writing runs fn, a write route's database work outside transactional,
// in one transaction of the request's tenant.
func (s *Server) writing(ctx context.Context, fn func(ctx context.Context, exec racefree.Executor) error) error {
	return tenant.InTx(ctx, s.db, tenant.From(ctx), func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx) })
}
