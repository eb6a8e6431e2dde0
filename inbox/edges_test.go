package inbox_test

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// The tests of this file try the inbox promises at their edges (the
// boundary matrix of docs/contributing.md): each limit at the limit and
// one past it, two values that differ in one dimension alone, each field
// a signature covers changed alone, each error class a delivery or the
// Handler tells apart, a caller cancelled at each stage, and the Handler
// and Verifier without their optional fields.

// TestEdgesInputBounds tries each documented input limit at the limit and
// one past it: a source of MaxSourceLen bytes and an event ID of
// MaxEventIDLen bytes (two-byte characters: the limits count bytes) are
// recorded, deduplicated and listed, one byte more is an InputError that
// writes nothing; List takes a limit of 1 and MaxListLimit, and refuses 0,
// MaxListLimit + 1 and a negative after; New takes a Retention of 1 ms
// and 10 years and a ReapBatch of 1 and 100,000, and refuses 1 ms − 1 ns,
// 10 years + 1 ms, -1 and 100,001; a Retention of 1 ms keeps an event a
// duplicate for exactly that millisecond.
func TestEdgesInputBounds(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		b := setup(t, db, nil)
		source := strings.Repeat("é", inbox.MaxSourceLen/2)
		id := strings.Repeat("é", inbox.MaxEventIDLen/2) + "x"
		other := strings.Repeat("é", inbox.MaxEventIDLen/2) + "y"
		if len(source) != inbox.MaxSourceLen || len(id) != inbox.MaxEventIDLen {
			t.Fatalf("a source of %d bytes and an ID of %d: not at the limits", len(source), len(id))
		}
		if res, err := b.in.Receive(ctx, source, id, []byte("p"), nil); err != nil || res.Duplicate || res.Seq != 1 {
			t.Fatalf("a source and an ID at their limits: %+v, %v; want new with seq 1", res, err)
		}
		called := false
		if res, err := b.in.Receive(ctx, source, id, []byte("p"), func(*sql.Tx) error { called = true; return nil }); err != nil || !res.Duplicate || called {
			t.Fatalf("its redelivery: %+v, %v, fn called %v; want a duplicate", res, err, called)
		}
		if res, err := b.in.Receive(ctx, source, other, nil, b.effect(ctx, other)); err != nil || res.Duplicate || res.Seq != 2 {
			t.Fatalf("another ID at the limit, processed: %+v, %v; want new with seq 2", res, err)
		}
		if evs, err := b.in.List(ctx, source, 0, 1); err != nil || len(evs) != 1 || evs[0].ID != id {
			t.Fatalf("List with a limit of 1: %v, %v; want the first event", ids(evs), err)
		}
		if evs, err := b.in.List(ctx, source, 0, inbox.MaxListLimit); err != nil || len(evs) != 2 || evs[1].ID != other {
			t.Fatalf("List with a limit of MaxListLimit: %v, %v; want both events", ids(evs), err)
		}

		refused := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%s: %v, want an InputError", what, err)
			}
		}
		fn := func(*sql.Tx) error { t.Error("fn called for refused input"); return nil }
		_, err := b.in.Receive(ctx, source+"s", "e", nil, fn)
		refused("a source of MaxSourceLen + 1 bytes", err)
		_, err = b.in.Receive(ctx, source+"s", "e", nil, nil)
		refused("a source of MaxSourceLen + 1 bytes, no fn", err)
		_, err = b.in.Receive(ctx, "s", id+"x", nil, fn)
		refused("an ID of MaxEventIDLen + 1 bytes", err)
		_, err = b.in.Receive(ctx, "s", strings.Repeat("é", inbox.MaxEventIDLen/2+1), nil, nil)
		refused("an ID of MaxEventIDLen + 1 bytes in two-byte characters", err)
		_, err = b.in.List(ctx, source+"s", 0, 1)
		refused("List of a source of MaxSourceLen + 1 bytes", err)
		_, err = b.in.List(ctx, source, 0, inbox.MaxListLimit+1)
		refused("List with a limit of MaxListLimit + 1", err)
		_, err = b.in.List(ctx, source, 0, 0)
		refused("List with a limit of 0", err)
		_, err = b.in.List(ctx, source, -1, 1)
		refused("List after -1", err)
		if got, want := b.rows(t), 2; got != want {
			t.Fatalf("%d rows after the refusals, want %d", got, want)
		}

		const tenYears = 10 * 365 * 24 * time.Hour
		for _, o := range []inbox.Options{{Retention: time.Millisecond}, {Retention: tenYears}, {ReapBatch: 1}, {ReapBatch: 100_000}} {
			if _, err := inbox.New(db, &o); err != nil {
				t.Errorf("New(%+v): %v, want accepted", o, err)
			}
		}
		for _, o := range []inbox.Options{{Retention: time.Millisecond - time.Nanosecond}, {Retention: tenYears + time.Millisecond}, {ReapBatch: -1}, {ReapBatch: 100_001}} {
			_, err := inbox.New(db, &o)
			refused(fmt.Sprintf("New(%+v)", o), err)
		}

		// A Retention of 1 ms: a duplicate at the instant it was received,
		// reaped (and new again) one millisecond later.
		short, err := inbox.New(db, &inbox.Options{Retention: time.Millisecond, ReapBatch: 100_000})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := short.Receive(ctx, "short", "e", nil, nil); err != nil || res.Duplicate {
			t.Fatalf("a delivery kept 1 ms: %+v, %v", res, err)
		}
		if n, err := short.Reap(ctx, db); err != nil || n != 0 {
			t.Fatalf("reap at the instant of receiving: %d, %v; want 0", n, err)
		}
		if res, err := short.Receive(ctx, "short", "e", nil, nil); err != nil || !res.Duplicate {
			t.Fatalf("its redelivery at the same instant: %+v, %v; want a duplicate", res, err)
		}
		clock.Advance(time.Millisecond)
		if n, err := short.Reap(ctx, db); err != nil || n != 1 {
			t.Fatalf("reap 1 ms later: %d, %v; want the short-lived event alone", n, err)
		}
		if res, err := short.Receive(ctx, "short", "e", nil, nil); err != nil || res.Duplicate {
			t.Fatalf("its redelivery after the reap: %+v, %v; want new", res, err)
		}
	})
}

// TestEdgesPermanentReasonIsCutAtItsLimit records permanent failures whose
// reasons sit at the 1024 bytes kept and one past: 1024 bytes are kept
// whole, 1025 cut to 1024, and a two-byte character across the cut is
// dropped whole, so that the reason stays valid UTF-8 (PostgreSQL refuses
// anything else, and the delivery would never be acknowledged); NUL bytes
// are dropped and bytes that are not UTF-8 replaced.
func TestEdgesPermanentReasonIsCutAtItsLimit(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		const limit = 1024
		for i, c := range []struct{ name, reason, want string }{
			{"1024 bytes", strings.Repeat("r", limit), strings.Repeat("r", limit)},
			{"1025 bytes", strings.Repeat("r", limit) + "s", strings.Repeat("r", limit)},
			{"a character across the cut", strings.Repeat("r", limit-1) + "é", strings.Repeat("r", limit-1)},
			{"NUL and a byte that is not UTF-8", "a\x00b\xffc", "ab\uFFFDc"},
		} {
			id := fmt.Sprintf("e%d", i)
			res, err := b.in.Receive(ctx, "s", id, nil, func(*sql.Tx) error { return inbox.Permanent(errors.New(c.reason)) })
			if err != nil || !res.Failed || res.Reason != c.want {
				t.Errorf("%s: %+v, %v; want acknowledged, failed, with the reason of %d bytes", c.name, res, err, len(c.want))
				continue
			}
			evs, err := b.in.List(ctx, "s", int64(i), 1)
			if err != nil || len(evs) != 1 || evs[0].ID != id || evs[0].Reason != c.want || !utf8.ValidString(evs[0].Reason) {
				t.Errorf("%s: List %+v, %v; want the reason as returned", c.name, evs, err)
			}
		}
	})
}

// TestEdgesVerifierBounds tries the Verifier's limits at the limit and one
// past it, with and without its optional Tolerance: a secret whose key is
// 16 bytes verifies, 15 bytes is refused (by NewVerifier and Sign); a
// Tolerance of 1 s, 1 minute and 24 hours accepts a delivery signed that
// far ahead or behind and refuses one a second further; without one, the
// tolerance is 5 minutes.
func TestEdgesVerifierBounds(t *testing.T) {
	t.Parallel()
	secret := func(n int) string {
		return "whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", n)))
	}
	clock := racefree.NewManualClock(t0)
	const body = `{"type":"invoice.paid"}`
	v, err := inbox.NewVerifier([]string{secret(16)}, &inbox.VerifierOptions{Clock: clock})
	if err != nil {
		t.Fatalf("a secret of a 16-byte key: %v", err)
	}
	if id, err := v.Verify(signed(t, secret(16), "e1", t0, body), []byte(body)); err != nil || id != "e1" {
		t.Fatalf("a delivery signed with a 16-byte key: %q, %v", id, err)
	}
	if _, err := inbox.NewVerifier([]string{secret(15)}, nil); !errors.Is(err, racefree.ErrInvalidInput) {
		t.Errorf("a secret of a 15-byte key: %v, want an InputError", err)
	}
	if _, err := inbox.Sign(secret(15), "e1", t0, []byte(body)); !errors.Is(err, racefree.ErrInvalidInput) {
		t.Errorf("Sign with a 15-byte key: %v, want an InputError", err)
	}
	for _, tol := range []time.Duration{0, time.Second, time.Minute, 24 * time.Hour} {
		v, err := inbox.NewVerifier([]string{secretA}, &inbox.VerifierOptions{Tolerance: tol, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		edge := tol
		if tol == 0 {
			edge = inbox.DefaultTolerance
		}
		for _, c := range []struct {
			at time.Time
			ok bool
		}{{t0.Add(-edge), true}, {t0.Add(edge), true}, {t0.Add(-edge - time.Second), false}, {t0.Add(edge + time.Second), false}} {
			_, err := v.Verify(signed(t, secretA, "e1", c.at, body), []byte(body))
			if got := err == nil; got != c.ok {
				t.Errorf("Tolerance %s, signed %s from now: verified %v (%v), want %v", tol, c.at.Sub(t0), got, err, c.ok)
			}
		}
	}
}

// TestEdgesSignatureCoversEachFieldAlone changes each field a Standard
// Webhooks signature covers, alone, and expects the genuine delivery's
// verdict to turn: the event ID by one character, the timestamp by one
// second either way (well within the tolerance), the body by one byte or
// one byte more, and the secret by one bit of its key.
func TestEdgesSignatureCoversEachFieldAlone(t *testing.T) {
	t.Parallel()
	v, err := inbox.NewVerifier([]string{secretA}, &inbox.VerifierOptions{Clock: racefree.NewManualClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"type":"invoice.paid"}`
	genuine := signed(t, secretA, "evt_1", t0, body)
	if id, err := v.Verify(genuine, []byte(body)); err != nil || id != "evt_1" {
		t.Fatalf("the genuine delivery: %q, %v", id, err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secretA, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	key[len(key)-1] ^= 1
	oneBitOff := "whsec_" + base64.StdEncoding.EncodeToString(key)
	with := func(name, value string) http.Header {
		h := genuine.Clone()
		h.Set(name, value)
		return h
	}
	for _, c := range []struct {
		name string
		h    http.Header
		body string
	}{
		{"the event ID", with("webhook-id", "evt_2"), body},
		{"the timestamp a second later", with("webhook-timestamp", strconv.FormatInt(t0.Unix()+1, 10)), body},
		{"the timestamp a second earlier", with("webhook-timestamp", strconv.FormatInt(t0.Unix()-1, 10)), body},
		{"one byte of the body", genuine, strings.Replace(body, "paid", "pair", 1)},
		{"one byte more of the body", genuine, body + "\n"},
		{"one bit of the secret's key", with("webhook-signature", signed(t, oneBitOff, "evt_1", t0, body).Get("webhook-signature")), body},
	} {
		if _, err := v.Verify(c.h, []byte(c.body)); !errors.Is(err, inbox.ErrSignature) {
			t.Errorf("%s changed alone: %v, want ErrSignature", c.name, err)
		}
	}
}

// TestEdgesOneEventIDFromTwoSources delivers one event ID from two sources
// (the sources differ, nothing else does), through the combiner: alone in
// turn, each source records the event as its own, numbered from its own
// counter, and a redelivery is a duplicate in its source only, with and
// without a processing function; in one batch, the two deliveries are
// both new, each number 1 of its source, and each source's next event is
// number 2 (PostgreSQL numbers the batch in one statement over arrays,
// SQLite statement by statement).
func TestEdgesOneEventIDFromTwoSources(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		receive := func(source, id string, fn func(*sql.Tx) error) inbox.Result {
			t.Helper()
			res, err := b.in.Receive(ctx, source, id, []byte(source+"/"+id), fn)
			if err != nil {
				t.Fatalf("receive %s/%s: %v", source, id, err)
			}
			return res
		}
		// Alone, in turn: s has x as its second event, t as its first.
		for _, c := range []struct {
			source, id string
			want       inbox.Result
		}{
			{"s", "e0", inbox.Result{Seq: 1}},
			{"s", "x", inbox.Result{Seq: 2}},
			{"t", "x", inbox.Result{Seq: 1}},
			{"t", "x", inbox.Result{Duplicate: true}},
			{"s", "x", inbox.Result{Duplicate: true}},
			{"t", "y", inbox.Result{Seq: 2}},
		} {
			if res := receive(c.source, c.id, nil); res != c.want {
				t.Fatalf("%s/%s: %+v, want %+v", c.source, c.id, res, c.want)
			}
		}
		// With a processing function: u's x is new, and processed.
		if res := receive("u", "x", b.effect(ctx, "u/x")); res.Duplicate || res.Seq != 1 {
			t.Fatalf("u/x with fn: %+v, want new with seq 1", res)
		}
		called := false
		if res := receive("u", "x", func(*sql.Tx) error { called = true; return nil }); !res.Duplicate || called {
			t.Fatalf("u/x again: %+v, fn called %v; want a duplicate", res, called)
		}

		// In one batch: v/z and w/z behind the gate.
		open := gate(t, db, b.in)
		results := make(chan string, 2)
		for i, source := range []string{"v", "w"} {
			go func() {
				res, err := b.in.Receive(ctx, source, "z", []byte(source+"/z"), nil)
				results <- fmt.Sprintf("%s %+v %v", source, res, err)
			}()
			testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == i+1 })
		}
		open()
		got := map[string]bool{<-results: true, <-results: true}
		for _, want := range []string{"v {Duplicate:false Failed:false Reason: Seq:1} <nil>", "w {Duplicate:false Failed:false Reason: Seq:1} <nil>"} {
			if !got[want] {
				t.Errorf("the batch of v/z and w/z: %v, want %q", got, want)
			}
		}
		if s := db.CombineStats(); s.MaxBatch < 2 {
			t.Fatalf("combiner %+v: v/z and w/z did not share a batch", s)
		}
		for _, source := range []string{"v", "w"} {
			if res := receive(source, "z2", nil); res.Duplicate || res.Seq != 2 {
				t.Errorf("%s/z2 after the batch: %+v, want new with seq 2", source, res)
			}
			if res := receive(source, "z", nil); !res.Duplicate {
				t.Errorf("%s/z again: %+v, want a duplicate", source, res)
			}
		}
		for source, want := range map[string][]string{
			"s": {"e0=s/e0", "x=s/x"}, "t": {"x=t/x", "y=t/y"}, "u": {"x=u/x"},
			"v": {"z=v/z", "z2=v/z2"}, "w": {"z=w/z", "z2=w/z2"},
		} {
			if got := list(t, ctx, b.in, source); !equal(got, want) {
				t.Errorf("List(%s): %v, want %v", source, got, want)
			}
		}
	})
}

// conflict returns, for db's engine, the error of a transient conflict
// that the engine aborts a transaction with: on PostgreSQL a serialization
// failure (40001) the server raises in tx; on SQLite an error matching
// racefree.ErrRetryable (its busy error cannot arise in a transaction
// that holds the write lock, as Receive's does).
func conflict(ctx context.Context, db *racefree.DB, tx *sql.Tx) error {
	if db.Engine() != racefree.Postgres {
		return fmt.Errorf("processing: %w", racefree.ErrRetryable)
	}
	_, err := tx.ExecContext(ctx, `DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = 'serialization_failure'; END $$`)
	if err == nil {
		return errors.New("the server raised no serialization failure")
	}
	return err
}

// TestEdgesEachErrorClassOfTheProcessing tells apart each class of error
// a processing function returns, as Receive and the Handler see it: a
// transient conflict of the engine runs fn again in a new transaction
// (the first attempt's writes rolled back), and once the attempts
// (Config.TxAttempts) are spent is returned, matching ErrRetryable,
// with nothing recorded, which the Handler answers 503; an unmarked error
// is returned at once, fn not run again, and answered 500; an error
// matching ErrUnavailable is answered 503, and on PostgreSQL a write the
// server refuses as read-only 503 read-only; a Permanent one is recorded
// and answered 204. Every redelivery after a 5xx is processed once.
func TestEdgesEachErrorClassOfTheProcessing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{TxAttempts: 3, TxBackoff: time.Millisecond}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		b := setup(t, db, nil)
		attempts := map[string]int{}
		process := func(ctx context.Context, tx *sql.Tx, d inbox.Delivery) error {
			attempts[d.ID]++
			if err := b.effect(ctx, d.ID)(tx); err != nil {
				return err
			}
			switch d.ID {
			case "conflict once":
				if attempts[d.ID] == 1 {
					return conflict(ctx, db, tx)
				}
			case "conflict":
				return conflict(ctx, db, tx)
			case "unmarked":
				return errors.New("downstream answered 500")
			case "unavailable":
				return fmt.Errorf("downstream: %w", racefree.ErrUnavailable)
			case "read-only":
				if _, err := tx.ExecContext(ctx, `SET TRANSACTION READ ONLY`); err != nil {
					return err
				}
				return b.effect(ctx, d.ID)(tx)
			case "permanent":
				return inbox.Permanent(errors.New("unknown event type"))
			}
			return nil
		}

		// Receive.
		receive := func(id string) (inbox.Result, error) {
			return b.in.Receive(ctx, "s", id, nil, func(tx *sql.Tx) error {
				return process(ctx, tx, inbox.Delivery{Source: "s", ID: id})
			})
		}
		if res, err := receive("conflict once"); err != nil || res.Duplicate || res.Seq != 1 || attempts["conflict once"] != 2 {
			t.Fatalf("a conflict on the first attempt: %+v, %v after %d attempts; want new with seq 1 after 2", res, err, attempts["conflict once"])
		}
		if _, err := receive("conflict"); !errors.Is(err, racefree.ErrRetryable) || inbox.IsPermanent(err) || attempts["conflict"] != 3 {
			t.Fatalf("a conflict on every attempt: %v after %d attempts; want ErrRetryable after 3 (Config.TxAttempts)", err, attempts["conflict"])
		}
		if _, err := receive("unmarked"); err == nil || errors.Is(err, racefree.ErrRetryable) || inbox.IsPermanent(err) || attempts["unmarked"] != 1 {
			t.Fatalf("an unmarked error: %v after %d attempts; want it returned after 1", err, attempts["unmarked"])
		}
		if got, want := b.effects(t), map[string]int{"conflict once": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("effects %v, want %v: each failed attempt's writes roll back", got, want)
		}
		if got := list(t, ctx, b.in, "s"); !equal(got, []string{"conflict once="}) {
			t.Fatalf("List %v, want the processed event alone", got)
		}

		// The Handler, on another source.
		v, err := inbox.NewVerifier([]string{secretA}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := &inbox.Handler{Inbox: b.in, Source: "hook", Verifier: v, Process: process, Logger: slog.New(slog.DiscardHandler)}
		post := func(id string) (int, string) {
			req := httptest.NewRequest("POST", "/", strings.NewReader(`{}`))
			req.Header = signed(t, secretA, id, time.Now(), `{}`)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			raw, _ := io.ReadAll(rec.Body)
			return rec.Code, string(raw)
		}
		clear(attempts)
		cases := []struct {
			id      string
			code    int
			problem string
		}{
			{"conflict once", 204, ""},
			{"conflict", 503, "unavailable"},
			{"unavailable", 503, "unavailable"},
			{"unmarked", 500, "internal"},
			{"permanent", 204, ""},
		}
		if db.Engine() == racefree.Postgres {
			cases = append(cases, struct {
				id      string
				code    int
				problem string
			}{"read-only", 503, "read-only"})
		}
		for _, c := range cases {
			code, body := post(c.id)
			if code != c.code || c.problem != "" && !strings.Contains(body, `"urn:racefree:problem:`+c.problem+`"`) {
				t.Errorf("%s: %d %s, want %d %s", c.id, code, body, c.code, c.problem)
			}
		}
		// A redelivery after a 2xx is a duplicate, fn not run; after a 5xx
		// the event is delivered anew: fn runs, and answers as before.
		clear(attempts)
		for _, c := range cases {
			code, body := post(c.id)
			if ran := attempts[c.id] > 0; code != c.code || ran != (c.code >= 500) {
				t.Errorf("%s again: %d %s, processed %v; want %d, processed %v", c.id, code, body, ran, c.code, c.code >= 500)
			}
		}
		if got := list(t, ctx, b.in, "hook"); !equal(got, []string{"conflict once={}", "permanent={}"}) {
			t.Errorf("List(hook) %v, want the processed and the permanently failed events", got)
		}
	})
}

// TestEdgesCancelledDelivery cancels a delivery at each stage: before it
// is sent (with and without a processing function), in its transaction
// before the commit (fn returning nil, and Permanent), and on PostgreSQL
// while it waits for a row lock: the unique entry of a concurrent
// delivery of the same event, and its source's counter row. Each caller
// gets the context's error, never an acknowledgement, and never
// racefree.ErrUnavailable: Receive's transaction never sent its COMMIT,
// so nothing of it can commit later. Nothing is recorded, fn's writes roll
// back with it, the counter does not move, and the redelivery is processed
// once, numbered on without a gap.
func TestEdgesCancelledDelivery(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b := setup(t, db, nil)
		cancelled := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, context.Canceled) || errors.Is(err, racefree.ErrUnavailable) || inbox.IsPermanent(err) {
				t.Fatalf("%s: %v, want context.Canceled alone (nothing of it can commit)", what, err)
			}
		}
		notCalled := func(*sql.Tx) error { t.Error("fn called with a cancelled context"); return nil }

		// Before it is sent.
		gone, stop := context.WithCancel(ctx)
		stop()
		_, err := b.in.Receive(gone, "s", "e", nil, notCalled)
		cancelled("a delivery with a cancelled context", err)
		_, err = b.in.Receive(gone, "s", "e", nil, nil)
		cancelled("a delivery without fn with a cancelled context", err)

		// In its transaction, before the commit.
		for _, ret := range []error{nil, inbox.Permanent(errors.New("unknown type"))} {
			inTx, stopTx := context.WithCancel(ctx)
			_, err = b.in.Receive(inTx, "s", "e", nil, func(tx *sql.Tx) error {
				if err := b.effect(ctx, "e")(tx); err != nil {
					return err
				}
				stopTx()
				return ret
			})
			cancelled(fmt.Sprintf("a delivery cancelled in fn, which returns %v", ret), err)
		}
		if n, effects := b.rows(t), b.effects(t); n != 0 || len(effects) != 0 {
			t.Fatalf("%d rows, effects %v after cancelled deliveries; want none", n, effects)
		}
		if res, err := b.in.Receive(ctx, "s", "e", nil, b.effect(ctx, "e")); err != nil || res.Duplicate || res.Seq != 1 {
			t.Fatalf("the redelivery: %+v, %v; want new with seq 1", res, err)
		}
		if db.Engine() != racefree.Postgres {
			return
		}

		// On the unique entry of a concurrent delivery of the same event.
		inFn, release := make(chan int, 1), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, err := b.in.Receive(ctx, "s", "locked", nil, func(tx *sql.Tx) error {
				var pid int
				if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					return err
				}
				inFn <- pid
				<-release
				return b.effect(ctx, "locked")(tx)
			})
			first <- err
		}()
		pid := <-inFn
		waiting, stopWaiting := context.WithCancel(ctx)
		second := make(chan error, 1)
		go func() {
			_, err := b.in.Receive(waiting, "s", "locked", nil, notCalled)
			second <- err
		}()
		if !testdb.BlockedBy(t, db, pid, nil) {
			t.Fatal("the second delivery did not wait for the first")
		}
		stopWaiting()
		cancelled("a delivery cancelled on the unique entry of another", <-second)
		close(release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if res, err := b.in.Receive(ctx, "s", "locked", nil, notCalled); err != nil || !res.Duplicate {
			t.Fatalf("the cancelled delivery's redelivery: %+v, %v; want a duplicate", res, err)
		}

		// On the source's counter row, held by another transaction.
		holder, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback() }()
		if _, err := holder.ExecContext(ctx, `UPDATE racefree_inbox_sources SET last_seq = last_seq WHERE source = 's'`); err != nil {
			t.Fatal(err)
		}
		pid = testdb.BackendPID(t, holder)
		waiting, stopWaiting = context.WithCancel(ctx)
		go func() {
			_, err := b.in.Receive(waiting, "s", "counted", nil, b.effect(ctx, "counted"))
			second <- err
		}()
		if !testdb.BlockedBy(t, db, pid, nil) {
			t.Fatal("the delivery did not wait for the counter row")
		}
		stopWaiting()
		cancelled("a delivery cancelled on its source's counter row", <-second)
		if err := holder.Rollback(); err != nil {
			t.Fatal(err)
		}
		if res, err := b.in.Receive(ctx, "s", "counted", nil, b.effect(ctx, "counted")); err != nil || res.Duplicate || res.Seq != 3 {
			t.Fatalf("the redelivery: %+v, %v; want new with seq 3 (no gap)", res, err)
		}
		if got, want := b.effects(t), map[string]int{"e": 1, "locked": 1, "counted": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("effects %v, want %v", got, want)
		}
	})
}

// TestEdgesCancelledCombinedDelivery cancels deliveries without a
// processing function that go through the combiner: one with a done
// context is refused before it joins a batch, one cancelled while it
// waits in the queue behind a batch in flight leaves the queue at once;
// both get the context's error, and nothing is recorded. One whose batch
// is in flight (waiting for its source's counter row) when it is
// cancelled gets the batch's outcome: its event recorded, with its
// number.
func TestEdgesCancelledCombinedDelivery(t *testing.T) {
	t.Parallel()
	testdb.Each(t, &racefree.Config{Combine: racefree.CombineOn, CombineBatches: 1}, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		in, err := inbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := in.Receive(ctx, "s", "s0", nil, nil); err != nil || res.Seq != 1 {
			t.Fatalf("s/s0: %+v, %v", res, err)
		}
		gone, stop := context.WithCancel(ctx)
		stop()
		if _, err := in.Receive(gone, "t", "done", nil, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("a delivery with a done context: %v, want context.Canceled", err)
		}

		// In flight: s1's batch waits for a transaction that holds s's
		// counter row (on SQLite, the write lock).
		holder, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback() }()
		if _, err := holder.ExecContext(ctx, `UPDATE racefree_inbox_sources SET last_seq = last_seq WHERE source = 's'`); err != nil {
			t.Fatal(err)
		}
		flying, stopFlying := context.WithCancel(ctx)
		inFlight := make(chan string, 1)
		go func() {
			res, err := in.Receive(flying, "s", "s1", nil, nil)
			inFlight <- fmt.Sprintf("%+v %v", res, err)
		}()
		testdb.WaitCombiner(t, db, "s1's batch", func(s racefree.CombineStats) bool { return s.Running == 1 })

		// Queued behind it.
		queued, stopQueued := context.WithCancel(ctx)
		waiter := make(chan error, 1)
		go func() {
			_, err := in.Receive(queued, "t", "queued", nil, nil)
			waiter <- err
		}()
		testdb.WaitCombiner(t, db, "the queue", func(s racefree.CombineStats) bool { return s.Queued == 1 })
		stopQueued()
		select {
		case err := <-waiter:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("a delivery cancelled in the queue: %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a delivery cancelled in the queue did not return while the batch ahead of it waits")
		}
		if s := db.CombineStats(); s.Queued != 0 {
			t.Fatalf("combiner %+v: the cancelled delivery is still queued", s)
		}
		stopFlying()
		if err := holder.Rollback(); err != nil {
			t.Fatal(err)
		}
		if got, want := <-inFlight, "{Duplicate:false Failed:false Reason: Seq:2} <nil>"; got != want {
			t.Fatalf("a delivery cancelled while its batch was in flight: %s, want %s (the batch's outcome)", got, want)
		}
		if got := list(t, ctx, in, "t"); len(got) != 0 {
			t.Fatalf("List(t) %v: a cancelled delivery was recorded", got)
		}
		for _, id := range []string{"done", "queued"} {
			if res, err := in.Receive(ctx, "t", id, nil, nil); err != nil || res.Duplicate {
				t.Fatalf("the redelivery of %s: %+v, %v; want new", id, res, err)
			}
		}
	})
}

// TestEdgesHandlerWithoutItsOptionalFields runs a Handler with its
// required fields alone (no Process, MaxBody, Logger): a body of exactly
// DefaultMaxBody (1 MiB) is recorded with its payload, one byte more is
// answered 413; a redelivery is a duplicate. With MaxBody set, a body of
// exactly MaxBody is taken and one byte more refused.
func TestEdgesHandlerWithoutItsOptionalFields(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		in, err := inbox.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		v, err := inbox.NewVerifier([]string{secretA}, nil)
		if err != nil {
			t.Fatal(err)
		}
		post := func(h *inbox.Handler, id string, size int) int {
			body := strings.Repeat("b", size)
			req := httptest.NewRequest("POST", "/", strings.NewReader(body))
			req.Header = signed(t, secretA, id, time.Now(), body)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec.Code
		}
		bare := &inbox.Handler{Inbox: in, Source: "bare", Verifier: v}
		capped := &inbox.Handler{Inbox: in, Source: "capped", Verifier: v, MaxBody: 64}
		for _, c := range []struct {
			h    *inbox.Handler
			id   string
			size int
			want int
		}{
			{bare, "max", inbox.DefaultMaxBody, 204},
			{bare, "max", inbox.DefaultMaxBody, 204}, // a duplicate
			{bare, "over", inbox.DefaultMaxBody + 1, 413},
			{capped, "max", 64, 204},
			{capped, "over", 65, 413},
		} {
			if got := post(c.h, c.id, c.size); got != c.want {
				t.Errorf("%s: a body of %d bytes: %d, want %d", c.h.Source, c.size, got, c.want)
			}
		}
		for source, size := range map[string]int{"bare": inbox.DefaultMaxBody, "capped": 64} {
			evs, err := in.List(ctx, source, 0, 10)
			if err != nil || len(evs) != 1 || evs[0].ID != "max" || len(evs[0].Payload) != size {
				t.Errorf("List(%s): %d events, %v; want max alone, with its %d bytes", source, len(evs), err, size)
			}
		}
	})
}

// TestEdgesPermanentFailureBesideAConcurrentDelivery fails the processing
// of an event permanently while another delivery of it waits (PostgreSQL:
// for the unique entry of the first one's transaction). Once the first
// rolls back, either its failure record comes first (the event is failed,
// the second delivery a duplicate), or the second delivery records and
// processes the event first, and the first, recording its failure in a
// transaction of its own, finds the event recorded: it is acknowledged as
// a duplicate, and the event stays processed, as the second left it, not
// failed. Which comes first is the server's to choose: the race runs
// again, on a source of its own, until the second has come first once.
func TestEdgesPermanentFailureBesideAConcurrentDelivery(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		if db.Engine() != racefree.Postgres {
			t.Skip("SQLite runs one write transaction at a time, and the failure record's nearly always comes first")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b := setup(t, db, nil)
		type outcome struct {
			res inbox.Result
			err error
		}
		// deliver receives source/race with a processing function that
		// sends its backend's pid, waits for release, writes its effect and
		// returns ret.
		deliver := func(source, payload string, ret error, pids chan<- int, release <-chan struct{}) <-chan outcome {
			out := make(chan outcome, 1)
			go func() {
				res, err := b.in.Receive(ctx, source, "race", []byte(payload), func(tx *sql.Tx) error {
					var pid int
					if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
						return err
					}
					pids <- pid
					<-release
					if err := b.effect(ctx, source)(tx); err != nil {
						return err
					}
					return ret
				})
				out <- outcome{res, err}
			}()
			return out
		}
		// race runs one race on source and reports whether the second
		// delivery came first.
		race := func(source string) bool {
			pids1, release1 := make(chan int, 1), make(chan struct{})
			pids2, release2 := make(chan int, 1), make(chan struct{})
			defer close(release2)
			first := deliver(source, "first", inbox.Permanent(errors.New("unknown type")), pids1, release1)
			firstPid := <-pids1
			second := deliver(source, "second", nil, pids2, release2)
			if !testdb.BlockedBy(t, db, firstPid, nil) {
				t.Fatal("the second delivery did not wait for the first")
			}
			close(release1) // the first fails permanently and rolls back
			select {
			case o := <-second:
				if o1 := <-first; o1.err != nil || !o1.res.Failed || o1.res.Seq != 1 || o.err != nil || !o.res.Duplicate {
					t.Fatalf("the failure record first: the first delivery %+v, %v, the second %+v, %v; want failed with seq 1, and a duplicate", o1.res, o1.err, o.res, o.err)
				}
				evs, err := b.in.List(ctx, source, 0, 10)
				if err != nil || len(evs) != 1 || evs[0].Status != inbox.StatusFailed || string(evs[0].Payload) != "first" {
					t.Fatalf("List %+v, %v; want the event failed", evs, err)
				}
				return false
			case secondPid := <-pids2:
				if !testdb.BlockedBy(t, db, secondPid, nil) {
					t.Fatal("the first delivery's failure record did not wait for the second delivery")
				}
			}
			release2 <- struct{}{}
			if o := <-second; o.err != nil || o.res.Duplicate || o.res.Failed || o.res.Seq != 1 {
				t.Fatalf("the second delivery: %+v, %v; want new with seq 1", o.res, o.err)
			}
			if o := <-first; o.err != nil || !o.res.Duplicate || o.res.Failed {
				t.Fatalf("the permanently failed delivery: %+v, %v; want acknowledged as a duplicate", o.res, o.err)
			}
			evs, err := b.in.List(ctx, source, 0, 10)
			if err != nil || len(evs) != 1 || evs[0].Status != inbox.StatusProcessed || string(evs[0].Payload) != "second" || evs[0].Reason != "" {
				t.Fatalf("List %+v, %v; want the event processed, as the second delivery left it", evs, err)
			}
			if got := b.effects(t)[source]; got != 1 {
				t.Fatalf("processed %d times, want once", got)
			}
			return true
		}
		for try := 0; !race(fmt.Sprintf("s%d", try)); try++ {
			if try == 50 {
				t.Fatal("in 50 races the failure record always came first")
			}
		}
	})
}
