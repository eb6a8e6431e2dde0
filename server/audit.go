package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/tenant"
)

// auditRoutes serves the audit log when Options.AuditKeys is set; without
// a keyring every audit route answers 404 audit-unconfigured.
func (s *Server) auditRoutes() {
	if s.opts.AuditKeys != nil {
		s.audit, _ = audit.New(s.db, s.opts.AuditKeys) // fails only for a nil keyring
	}
	s.handle("POST /v1/audit", s.auditConfigured(s.transactional(s.appendAudit)))
	s.handle("GET /v1/audit", s.auditConfigured(http.HandlerFunc(s.listAudit)))
	s.handle("GET /v1/audit/verify", s.auditConfigured(http.HandlerFunc(s.verifyAudit)))
	s.handle("POST /v1/audit/checkpoints", s.auditConfigured(s.transactional(s.checkpointAudit)))
	s.handle("GET /v1/audit/checkpoints/latest", s.auditConfigured(http.HandlerFunc(s.latestCheckpoint)))
}

func (s *Server) auditConfigured(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.audit == nil {
			writeProblem(w, problem.AuditUnconfigured.New("this server has no audit keyring (serve --audit-keys FILE or RACEFREE_AUDIT_KEYS)"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// auditEntryJSON is an entry as the API shows it. Data is the JSON the
// entry was appended with, or, for data that is not JSON, a string of
// its base64 in data_base64.
type auditEntryJSON struct {
	Scope      string          `json:"scope"`
	Seq        int64           `json:"seq"`
	At         string          `json:"at"`
	Actor      string          `json:"actor"`
	Action     string          `json:"action"`
	Subject    string          `json:"subject"`
	Data       json.RawMessage `json:"data,omitempty"`
	DataBase64 []byte          `json:"data_base64,omitempty"`
	KeyID      string          `json:"key_id"`
	PrevMAC    []byte          `json:"prev_mac"` // base64
	MAC        []byte          `json:"mac"`      // base64
}

func toAuditEntryJSON(r *audit.Record) auditEntryJSON {
	e := auditEntryJSON{Scope: r.Scope, Seq: r.Seq, At: formatTime(r.At), Actor: r.Actor, Action: r.Action, Subject: r.Subject,
		KeyID: r.KeyID, PrevMAC: r.PrevMAC, MAC: r.MAC}
	switch {
	case len(r.Data) == 0:
	case json.Valid(r.Data):
		e.Data = r.Data
	default:
		e.DataBase64 = r.Data
	}
	return e
}

// appendRequest is the body of POST /v1/audit.
type appendRequest struct {
	Scope   string          `json:"scope"`
	Actor   string          `json:"actor"`
	Action  string          `json:"action"`
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data"`
}

// checkpointRequest is the body of POST /v1/audit/checkpoints.
type checkpointRequest struct {
	Scope string `json:"scope"`
}

func (s *Server) appendAudit(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	var req appendRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	rec, err := s.audit.Append(ctx, exec, req.Scope, audit.Entry{Actor: req.Actor, Action: req.Action, Subject: req.Subject, Data: req.Data})
	s.metrics.auditAppend(err)
	if err != nil {
		return nil, err
	}
	return toAuditEntryJSON(&rec), nil
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, limit, ok := page(w, q, audit.MaxListLimit)
	if !ok {
		return
	}
	if limit < 1 || limit > audit.MaxListLimit {
		badRequest(w, fmt.Sprintf("limit must be an integer between 1 and %d", audit.MaxListLimit))
		return
	}
	recs, err := s.audit.List(r.Context(), q.Get("scope"), after, limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// next: pass as after; unchanged when there was nothing new. A page
	// stops at MaxPageBytes of JSON, so a short one is not the end.
	out := newJSONPage("entries", after)
	for i := range recs {
		ok, err := out.add(toAuditEntryJSON(&recs[i]), recs[i].Seq)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if !ok {
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// verifyAudit verifies a scope's chain against the checkpoints stored in
// the database. Those catch a cut tail only when the checkpoints were left
// alone; keep exported checkpoints elsewhere and verify against them with
// racefree audit verify --checkpoint for the stronger check. A broken
// chain is a 200 whose intact is false: the request itself succeeded. A
// chain that moved to another PostgreSQL timeline (a failover) is intact
// with possible_loss and warnings ([audit.Result.PossibleLoss]): entries the
// old primary acknowledged after the entry named may have been lost.
func (s *Server) verifyAudit(w http.ResponseWriter, r *http.Request) {
	scope := r.URL.Query().Get("scope")
	cps, err := s.audit.Checkpoints(r.Context(), scope, 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.audit.Verify(r.Context(), scope, &audit.VerifyOptions{Checkpoints: cps})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.metrics.auditVerify(res.Break)
	s.verified.record(tenant.From(r.Context()), scope, &res)
	writeJSON(w, http.StatusOK, struct {
		Intact bool `json:"intact"`
		audit.Result
	}{res.Intact(), res})
}

func (s *Server) checkpointAudit(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	var req checkpointRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	c, err := s.audit.Checkpoint(ctx, exec, req.Scope)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (s *Server) latestCheckpoint(w http.ResponseWriter, r *http.Request) {
	c, err := s.audit.LatestCheckpoint(r.Context(), r.URL.Query().Get("scope"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}
