package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/seq"
)

// sequenceRoutes serves the gapless counters of package seq.
type sequenceRoutes struct {
	counters *seq.Counters
	ops      *prometheus.CounterVec // outcome
	numbers  prometheus.Counter
}

func (s *Server) sequenceRoutes() {
	sr := &sequenceRoutes{counters: seq.New(s.db), ops: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "racefree_sequence_operations_total",
		Help: "Sequence next calls by outcome: ok, exhausted, invalid or error.",
	}, []string{"outcome"}), numbers: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "racefree_sequence_numbers_total",
		Help: "Sequence numbers handed out (a call for n counts n), replays of an Idempotency-Key excluded. Not by scope or name: both are unbounded.",
	})}
	s.reg.MustRegister(sr.ops, sr.numbers)
	s.handle("POST /v1/sequences/{scope}/{name}/next", s.transactional(sr.next))
	s.handle("GET /v1/sequences/{scope}/{name}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sr.current(s, w, r) }))
}

// nextRequest is the body of POST /v1/sequences/{scope}/{name}/next.
type nextRequest struct {
	N *int64 `json:"n"`
}

type sequenceJSON struct {
	Scope string `json:"scope"`
	Name  string `json:"name"`
	First int64  `json:"first"`
	Last  int64  `json:"last"`
}

// next hands out n numbers (default 1) of the path's counter in the
// request's transaction: with an Idempotency-Key, the numbers and the
// stored answer commit together, so a retried request gets the same
// numbers back and none is consumed twice.
func (sr *sequenceRoutes) next(ctx context.Context, exec racefree.Executor, r *http.Request, body []byte) (any, error) {
	var req nextRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	n := int64(1)
	if req.N != nil {
		n = *req.N
	}
	scope, err := pathParam(r, "scope", seq.MaxScopeBytes)
	if err != nil {
		return nil, err
	}
	name, err := pathParam(r, "name", seq.MaxNameBytes)
	if err != nil {
		return nil, err
	}
	first, err := sr.counters.NextN(ctx, exec, scope, name, n)
	sr.count(err)
	if err != nil {
		return nil, err
	}
	sr.numbers.Add(float64(n))
	return sequenceJSON{Scope: scope, Name: name, First: first, Last: first + n - 1}, nil
}

// currentJSON is the answer of GET /v1/sequences/{scope}/{name}.
type currentJSON struct {
	Scope   string `json:"scope"`
	Name    string `json:"name"`
	Current int64  `json:"current"` // 0: none handed out yet
}

// current answers the last number the path's counter handed out in the
// request's tenant, as [seq.Counters.Current]: 0 for a counter that handed
// none out (a counter is not created by reading it). It takes no lock, so
// current + 1 is not the next number once another caller takes one.
func (sr *sequenceRoutes) current(s *Server, w http.ResponseWriter, r *http.Request) {
	scope, err := pathParam(r, "scope", seq.MaxScopeBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	name, err := pathParam(r, "name", seq.MaxNameBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var cur int64
	err = s.reading(r.Context(), func(ctx context.Context, exec racefree.Executor) (err error) {
		cur, err = sr.counters.Current(ctx, exec, scope, name)
		return err
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, currentJSON{Scope: scope, Name: name, Current: cur})
}

func (sr *sequenceRoutes) count(err error) {
	outcome := "error"
	switch {
	case err == nil:
		outcome = "ok"
	case errors.Is(err, seq.ErrExhausted):
		outcome = "exhausted"
	case errors.Is(err, racefree.ErrInvalidInput):
		outcome = "invalid"
	}
	sr.ops.WithLabelValues(outcome).Inc()
}
