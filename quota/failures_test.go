package quota_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/quota"
)

// The tests of this file try quota where the database fails it or is
// reached another way: the middleware's answer to a database that does not
// answer in time (by its FailClosed or FailOpen policy) and to a damaged
// table, and ConsumeAll on a *sql.DB and a *sql.Conn. gremlins found
// these branches NOT COVERED (docs/contributing.md, "An independent
// mutation score").

// served runs one request through mw to a handler that answers 204, and
// reports the response and whether the handler ran.
func served(mw func(http.Handler) http.Handler) (*httptest.ResponseRecorder, bool) {
	ran := false
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran = true
		w.WriteHeader(http.StatusNoContent)
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	return w, ran
}

// wantProblem fails the test unless w is a problem+json document of the
// given status and type (its short name: "unavailable", "internal"), with
// no RateLimit fields.
func wantProblem(t *testing.T, what string, w *httptest.ResponseRecorder, status int, kind string) {
	t.Helper()
	var body struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: %d %q: %v", what, w.Code, w.Body, err)
	}
	if w.Code != status || body.Status != status || body.Type != "urn:racefree:problem:"+kind {
		t.Fatalf("%s: %d %+v; want %d %s", what, w.Code, body, status, kind)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	if rl, rlp := w.Header().Get("RateLimit"), w.Header().Get("RateLimit-Policy"); rl != "" || rlp != "" {
		t.Fatalf("%s: RateLimit %q, RateLimit-Policy %q; want none", what, rl, rlp)
	}
}

// TestMiddlewareAnswersAnUnansweredDatabaseByItsPolicy holds the write
// lock (SQLite) or the key's row lock (PostgreSQL) in another transaction,
// so that the middleware's charge is not answered within its 200 ms Wait:
// under FailClosed the answer is a 503 unavailable problem with
// Retry-After and next is not called; under FailOpen next serves the
// request, with no RateLimit fields (no decision to tell) and no
// Retry-After. On PostgreSQL a client that hangs up while its charge waits
// for the lock (an unknown outcome, not a Degraded decision) gets the same
// 503. Once the lock is gone the same request is charged and carries its
// RateLimit fields again.
func TestMiddlewareAnswersAnUnansweredDatabaseByItsPolicy(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOff}, func(t *testing.T, db *racefree.DB) {
		l := setup(t, db)
		consume(t, l, db, "k", 1, gcra) // the row the holder locks
		key := func(*http.Request) (string, error) { return "k", nil }
		closed, open := gcra, gcra
		closed.Wait, open.Wait = 200*time.Millisecond, 200*time.Millisecond
		open.OnUnavailable = quota.FailOpen
		closedMW, err := l.Middleware(db, closed, key)
		if err != nil {
			t.Fatal(err)
		}
		openMW, err := l.Middleware(db, open, key)
		if err != nil {
			t.Fatal(err)
		}
		holder := holdTheCounters(t, db)

		w, ran := served(closedMW)
		wantProblem(t, "FailClosed, no answer within Wait", w, http.StatusServiceUnavailable, "unavailable")
		if ran {
			t.Fatal("FailClosed, no answer within Wait: next served the request")
		}
		if got, want := w.Header().Get("Retry-After"), problem.RetryAfterSeconds; got != want {
			t.Fatalf("FailClosed, no answer within Wait: Retry-After %q, want %q", got, want)
		}

		w, ran = served(openMW)
		if !ran || w.Code != http.StatusNoContent {
			t.Fatalf("FailOpen, no answer within Wait: %d, next ran %v; want 204 from next", w.Code, ran)
		}
		for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			if v := w.Header().Get(h); v != "" {
				t.Fatalf("FailOpen, no answer within Wait: %s %q, want none", h, v)
			}
		}

		// PostgreSQL: a client that hangs up while its charge waits for the
		// row lock on the pool leaves the charge's outcome unknown (the
		// server may commit it once the lock is free): no Degraded
		// decision, but ErrUnavailable, and the answer is the same 503,
		// never a 500. (With the combiner the charge waits in its batch.)
		if db.Engine() == racefree.Postgres {
			pid := testdb.BackendPID(t, holder)
			waitMW, err := l.Middleware(db, gcra, key) // a minute's Wait: the client gives up first
			if err != nil {
				t.Fatal(err)
			}
			ctx, hangUp := context.WithCancel(context.Background())
			w, ran := httptest.NewRecorder(), false
			done := make(chan struct{})
			go func() {
				defer close(done)
				waitMW(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })).
					ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
			}()
			if !testdb.BlockedBy(t, db, pid, done) {
				t.Fatal("the charge of a client that hangs up did not wait for the holder's row lock")
			}
			hangUp()
			<-done
			wantProblem(t, "a client that hung up on the row lock", w, http.StatusServiceUnavailable, "unavailable")
			if ran {
				t.Fatal("a client that hung up on the row lock: next served the request")
			}
		}

		if err := holder.Rollback(); err != nil {
			t.Fatal(err)
		}
		// A minute's Wait: on a loaded machine 200 ms may pass before the
		// pool answers even with the lock gone.
		answered := gcra
		answered.OnUnavailable = quota.FailOpen
		mw, err := l.Middleware(db, answered, key)
		if err != nil {
			t.Fatal(err)
		}
		w, ran = served(mw)
		if !ran || w.Code != http.StatusNoContent || w.Header().Get("RateLimit") == "" || w.Header().Get("RateLimit-Policy") == "" {
			t.Fatalf("after the lock: %d, next ran %v, RateLimit %q; want 204 from next with RateLimit fields", w.Code, ran, w.Header().Get("RateLimit"))
		}
	})
}

// TestMiddlewareAnswers500ForADamagedTable: an error that is neither an
// unanswered database nor a schema too old or too new (here: the
// counters' table renamed away in this test's own database, so the charge
// statement fails) is a 500 internal problem, under FailClosed and under
// FailOpen alike (a database that answered with an error is no reason to
// admit), and next is not called.
func TestMiddlewareAnswers500ForADamagedTable(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := setup(t, db)
		if _, err := db.ExecContext(ctx, `ALTER TABLE racefree_quotas RENAME TO racefree_quotas_damaged`); err != nil {
			t.Fatal(err)
		}
		open := gcra
		open.OnUnavailable = quota.FailOpen
		for _, c := range []struct {
			name string
			p    quota.Policy
		}{{"FailClosed", gcra}, {"FailOpen", open}} {
			mw, err := l.Middleware(db, c.p, func(*http.Request) (string, error) { return "k", nil })
			if err != nil {
				t.Fatal(err)
			}
			w, ran := served(mw)
			wantProblem(t, c.name+", a damaged table", w, http.StatusInternalServerError, "internal")
			if ran {
				t.Fatalf("%s, a damaged table: next served the request", c.name)
			}
			if v := w.Header().Get("Retry-After"); v != "" {
				t.Fatalf("%s, a damaged table: Retry-After %q, want none", c.name, v)
			}
		}
	})
}

// TestConsumeAllOnTheSQLDBAndAConn: ConsumeAll given the pool's *sql.DB
// (db.SQL()) or a *sql.Conn of it begins a transaction of its own on it,
// as on the *racefree.DB: an allowed call charges every request and
// commits, and a call denied by one request, wherever that request stands
// among them, leaves the others uncharged.
func TestConsumeAllOnTheSQLDBAndAConn(t *testing.T) {
	t.Parallel()
	clock, cfg := manual(t0)
	testdb.Each(t, cfg, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		l := setup(t, db)
		conn, err := db.SQL().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		perSecond := quota.Policy{Kind: quota.GCRA, Rate: 2, Per: 2 * time.Second, Burst: 2, Wait: time.Minute}
		daily := quota.Policy{Kind: quota.FixedWindow, Rate: 10, Per: 24 * time.Hour, Wait: time.Minute}
		for _, c := range []struct {
			name string
			exec racefree.Executor
		}{{"sql.DB", db.SQL()}, {"sql.Conn", conn}} {
			sec, day := c.name+":sec", c.name+":day"
			reqs := []quota.Request{{Key: sec, N: 1, Policy: perSecond}, {Key: day, N: 1, Policy: daily}}
			for i := range 2 {
				tatBefore, _ := row(t, db, sec, quota.GCRA)
				d, err := l.ConsumeAll(ctx, c.exec, reqs)
				if err != nil || !d.Allowed {
					t.Fatalf("%s, call %d: %+v, %v; want allowed", c.name, i+1, d, err)
				}
				if tat, _ := row(t, db, sec, quota.GCRA); tat <= tatBefore {
					t.Fatalf("%s, call %d: the per-second counter was not charged (tat %d, was %d)", c.name, i+1, tat, tatBefore)
				}
				if _, used := row(t, db, day, quota.FixedWindow); used != int64(i+1) {
					t.Fatalf("%s, call %d: daily used %d, want %d", c.name, i+1, used, i+1)
				}
			}
			// The per-second burst is spent: denied, whether the daily
			// request is charged after the refusal or before it.
			for _, rs := range [][]quota.Request{reqs, {reqs[1], reqs[0]}} {
				tatBefore, _ := row(t, db, sec, quota.GCRA)
				d, err := l.ConsumeAll(ctx, c.exec, rs)
				if err != nil || d.Allowed || d.RetryAfter != time.Second {
					t.Fatalf("%s, %s first: %+v, %v; want denied for 1s", c.name, rs[0].Key, d, err)
				}
				if tat, _ := row(t, db, sec, quota.GCRA); tat != tatBefore {
					t.Fatalf("%s, %s first: the refused per-second counter moved (tat %d, was %d)", c.name, rs[0].Key, tat, tatBefore)
				}
				if _, used := row(t, db, day, quota.FixedWindow); used != 2 {
					t.Fatalf("%s, %s first: daily used %d after a denial, want 2", c.name, rs[0].Key, used)
				}
			}
		}
		// Nothing of the calls is left open on the connection: it begins a
		// transaction of its own.
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("a transaction on the connection after ConsumeAll: %v", err)
		}
		_ = tx.Rollback()
	})
}
