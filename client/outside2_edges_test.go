package client_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/client"
	"github.com/racefree/racefree/dedup"
	problems "github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/internal/testing/conformance"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/postgres"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/server"
)

// outsideClient serves h on loopback behind a faulty proxy that answers
// its first fail requests with answer (nil: a dropped connection), and
// returns a client of it: the token "secret", opts' Attempts (3 when 0),
// a Backoff and a MaxBackoff of a millisecond unless opts sets them.
func outsideClient(t *testing.T, h http.Handler, answer func(http.ResponseWriter), fail int, opts client.Options) (*client.Client, *faulty, string) {
	t.Helper()
	f := &faulty{h: h, answer: answer, fail: fail}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	opts.Key = "secret"
	if opts.Attempts == 0 {
		opts.Attempts = 3
	}
	if opts.Backoff == 0 {
		opts.Backoff = time.Millisecond
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = time.Millisecond
	}
	c, err := client.New(srv.URL, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, f, srv.URL
}

// written answers with the problem of kind k as the server writes it
// (problem.Write: its body, its Retry-After on a 503).
func written(k problems.Kind) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) { problems.Write(w, k.New("answered by the proxy")) }
}

// TestOutsideRotateIsSentOnce: Rotate is sent once, never retried by the
// client, after a dropped connection or a 503 alike (a second rotation
// past the grace window would be a reuse that revokes the family): the
// call fails after exactly one request, matching racefree.ErrUnavailable,
// and the token, which that request never reached, is then rotated by
// the caller's own retry.
func TestOutsideRotateIsSentOnce(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		h := server.New(db, server.Options{Token: "secret"}).Handler()
		direct, _, _ := outsideClient(t, h, nil, 0, client.Options{})
		for _, c := range []struct {
			name   string
			answer func(http.ResponseWriter)
		}{{"a dropped connection", nil}, {"a 503", written(problems.Unavailable)}} {
			r, err := direct.IssueRefresh(ctx, "u1", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			lossy, f, _ := outsideClient(t, h, c.answer, 1, client.Options{Attempts: 5})
			if rot, err := lossy.Rotate(ctx, r.Token); err == nil || !errors.Is(err, racefree.ErrUnavailable) || f.requests() != 1 {
				t.Fatalf("rotate after %s: %+v, %v after %d requests; want ErrUnavailable after exactly 1, never a retry", c.name, rot, err, f.requests())
			}
			if rot, err := direct.Rotate(ctx, r.Token); err != nil || rot.Outcome != onetime.Rotated || rot.Next == nil || rot.Next.Generation != 2 {
				t.Fatalf("the caller's own retry after %s: %+v, %v; want rotated to generation 2", c.name, rot, err)
			}
		}
	})
}

// TestOutsideTokensAtTheirBoundsAndAfterALostReply: a code and a refresh
// token live for exactly onetime.MinTTL and onetime.MaxTTL are sent and
// issued, as the library issues them; an unknown token is a refusal with
// Outcome Unknown, not an error, to ConsumeCode and Rotate alike; a
// ConsumeCode whose reply was lost is retried with the same
// Idempotency-Key and gets Consumed back, not AlreadyUsed for the code
// its first attempt consumed.
func TestOutsideTokensAtTheirBoundsAndAfterALostReply(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		h := server.New(db, server.Options{Token: "secret"}).Handler()
		c, _, url := outsideClient(t, h, nil, 0, client.Options{})
		for _, ttl := range []time.Duration{onetime.MinTTL, onetime.MaxTTL} {
			code, err := c.IssueCode(ctx, "verify", "u1", ttl)
			if err != nil || code.ExpiresAt.Sub(code.IssuedAt) != ttl {
				t.Fatalf("a code of ttl %v: %+v, %v; want one live for exactly that", ttl, code, err)
			}
			if r, err := c.IssueRefresh(ctx, "u1", ttl); err != nil || r.Token == "" || r.Generation != 1 {
				t.Fatalf("a refresh token of ttl %v: %+v, %v; want generation 1", ttl, r, err)
			}
		}
		if red, err := c.ConsumeCode(ctx, "verify", "no-such-code"); err != nil || red.Outcome != onetime.Unknown {
			t.Fatalf("consume of an unknown code: %+v, %v; want Outcome Unknown and no error", red, err)
		}
		if rot, err := c.Rotate(ctx, "no-such-token"); err != nil || rot.Outcome != onetime.Unknown || rot.Next != nil {
			t.Fatalf("rotate of an unknown token: %+v, %v; want Outcome Unknown and no error", rot, err)
		}

		code, err := c.IssueCode(ctx, "verify", "u2", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		lose := &loseFirstReply{seen: map[string]bool{}}
		lossy, err := client.New(url, &client.Options{Key: "secret", Backoff: time.Millisecond, HTTPClient: &http.Client{Transport: lose}})
		if err != nil {
			t.Fatal(err)
		}
		red, err := lossy.ConsumeCode(ctx, "verify", code.Token)
		if err != nil || red.Outcome != onetime.Consumed || red.Subject != "u2" {
			t.Fatalf("consume after a lost reply: %+v, %v; want Consumed with the subject, the first attempt's outcome", red, err)
		}
		if len(lose.keys) != 2 || lose.keys[0] == "" || lose.keys[0] != lose.keys[1] {
			t.Fatalf("Idempotency-Keys of the consume's attempts: %q; want one key, sent again", lose.keys)
		}
	})
}

// TestOutsideProblemsAreTheLibrarysErrors: a problem unwraps to the
// library's error of the same meaning. Every 503 the server answers a
// /v1/ route with (unavailable, idempotency-unavailable, read-only,
// not-durable) or /readyz (not-ready) matches racefree.ErrUnavailable
// after the retries, read-only racefree.ErrReadOnly and not-durable
// racefree.ErrNotDurable as well, as the library's errors do; so does a
// write to a real PostgreSQL whose sessions are read-only; a counter at
// its end is seq.ErrExhausted, not another error.
func TestOutsideProblemsAreTheLibrarysErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("503", func(t *testing.T) {
		t.Parallel()
		h := heldServer(t)
		for _, c := range []struct {
			kind problems.Kind
			also error
		}{
			{problems.Unavailable, nil},
			{problems.IdempotencyUnknown, nil},
			{problems.NotReady, nil},
			{problems.ReadOnly, racefree.ErrReadOnly},
			{problems.NotDurable, racefree.ErrNotDurable},
		} {
			cl, f, _ := outsideClient(t, h, written(c.kind), 100, client.Options{Attempts: 2})
			_, err := cl.Acquire(ctx, "held", "me", time.Minute)
			var e *client.Error
			if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || f.requests() != 2 || !errors.Is(err, racefree.ErrUnavailable) {
				t.Errorf("503 %s: %v after %d requests; want the *Error matching racefree.ErrUnavailable after 2", c.kind.Name, err, f.requests())
			}
			if c.also != nil && !errors.Is(err, c.also) {
				t.Errorf("503 %s: %v; want it to match %v too, as the library's error does", c.kind.Name, err, c.also)
			}
		}
	})
	t.Run("read-only PostgreSQL", func(t *testing.T) {
		t.Parallel()
		dsn := testdb.NewPostgresDatabase(t)
		_ = testdb.Open(t, dsn, nil).Close() // migrated while writable
		testdb.SetReadOnly(t, dsn, true)
		db, err := postgres.Open(ctx, dsn, nil)
		if err != nil {
			t.Fatalf("open the read-only node: %v", err)
		}
		t.Cleanup(func() { _ = db.Close() })
		c, f, _ := outsideClient(t, server.New(db, server.Options{Token: "secret"}).Handler(), nil, 0, client.Options{Attempts: 2})
		_, err = c.Acquire(ctx, "job", "w1", time.Minute)
		if !errors.Is(err, racefree.ErrReadOnly) || !errors.Is(err, racefree.ErrUnavailable) || f.requests() != 2 {
			t.Fatalf("acquire on a read-only node: %v after %d requests; want ErrReadOnly and ErrUnavailable after 2", err, f.requests())
		}
	})
	t.Run("exhausted", func(t *testing.T) {
		t.Parallel()
		testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
			c, _, _ := outsideClient(t, server.New(db, server.Options{Token: "secret"}).Handler(), nil, 0, client.Options{})
			if first, err := c.Next(ctx, "invoices", "2026", 1); err != nil || first != 1 {
				t.Fatalf("next: %d, %v", first, err)
			}
			if _, err := db.ExecContext(ctx, fmt.Sprintf(`UPDATE racefree_sequences SET last = %d`, int64(math.MaxInt64-1))); err != nil {
				t.Fatal(err)
			}
			_, err := c.Next(ctx, "invoices", "2026", 2)
			if !errors.Is(err, seq.ErrExhausted) || errors.Is(err, racefree.ErrQuotaExceeded) {
				t.Fatalf("next 2 past the largest BIGINT: %v; want seq.ErrExhausted and no other sentinel", err)
			}
			if _, lib := seq.New(db).NextN(ctx, db, "invoices", "2026", 2); !errors.Is(lib, seq.ErrExhausted) {
				t.Fatalf("the library's next 2: %v; want seq.ErrExhausted, as the client's", lib)
			}
			if last, err := c.Next(ctx, "invoices", "2026", 1); err != nil || last != math.MaxInt64 {
				t.Fatalf("the last number: %d, %v; want %d, nothing consumed by the refusals", last, err, int64(math.MaxInt64))
			}
		})
	})
}

// TestOutsideBoundsAtTheLibrarysEdges: what the library accepts at its
// edges the client sends, and what it refuses the client refuses before
// any request: an audit page of exactly audit.MaxListLimit entries is
// asked for (and one more refused), a quota policy whose Per holds a
// fraction of a millisecond is an InputError with no request, an outbox
// message of MaxAttempts 1 is stored with 1 (not the server's default),
// and a base URL with a trailing slash reaches the same routes.
func TestOutsideBoundsAtTheLibrarysEdges(t *testing.T) {
	t.Parallel()
	ring := testRing(t)
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := server.New(db, server.Options{Token: "secret", AuditKeys: ring})
		c, f, url := outsideClient(t, s.Handler(), nil, 0, client.Options{})

		if _, err := c.Append(ctx, "orders", audit.Entry{Actor: "alice", Action: "refund"}); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Entries(ctx, "orders", 0, audit.MaxListLimit); err != nil || len(got) != 1 || got[0].Seq != 1 {
			t.Fatalf("entries with a limit of exactly %d: %+v, %v; want entry 1", audit.MaxListLimit, got, err)
		}
		before := f.requests()
		if _, err := c.Entries(ctx, "orders", 0, audit.MaxListLimit+1); !errors.Is(err, racefree.ErrInvalidInput) || f.requests() != before {
			t.Fatalf("entries with a limit of %d: %v after %d requests; want an InputError and none", audit.MaxListLimit+1, err, f.requests()-before)
		}

		p := quota.Policy{Kind: quota.GCRA, Rate: 1, Per: 1500 * time.Microsecond, Burst: 1}
		if d, err := c.Consume(ctx, "fraction", 1, p); !errors.Is(err, racefree.ErrInvalidInput) || f.requests() != before {
			t.Fatalf("consume under a Per of 1.5ms: %+v, %v after %d requests; want an InputError and none", d, err, f.requests()-before)
		}

		o, err := s.Outbox()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 2} {
			id, err := c.Enqueue(ctx, outbox.Message{Topic: "mail", MaxAttempts: n})
			if err != nil {
				t.Fatal(err)
			}
			if m, err := c.Message(ctx, id); err != nil || m.MaxAttempts != n {
				t.Fatalf("a message of MaxAttempts %d: %+v, %v; want it stored with %d", n, m, err, n)
			}
			if lib, err := o.Get(ctx, db, id); err != nil || lib.MaxAttempts != n {
				t.Fatalf("the library's message of MaxAttempts %d: %+v, %v", n, lib, err)
			}
		}

		slash, err := client.New(url+"/", &client.Options{Key: "secret", Attempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		if cl, err := slash.Acquire(ctx, "slash", "w1", time.Minute); err != nil || cl.Holder != "w1" || cl.Fence != 1 {
			t.Fatalf("acquire through %s/: %+v, %v; want the claim", url, cl, err)
		}
		if cl, err := slash.Get(ctx, "slash"); err != nil || cl.Holder != "w1" {
			t.Fatalf("get through %s/: %+v, %v; want the claim", url, cl, err)
		}
	})
}

// TestOutsideAnswersCarryTheServersFigures: the typed errors and
// decisions the client returns carry what the server sent, as the
// library's do: a *claim.HeldError the live claim (Live, holder, fence,
// expiry); a quota denial the same Remaining, RetryAfter and ResetAt as
// the library's denial of the same charge at the same instant; a
// *claim.StaleFenceError of Record the fence the caller sent and the
// current one; and Dead filters by Topic and Key together.
func TestOutsideAnswersCarryTheServersFigures(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(conformance.T0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := server.New(db, server.Options{Token: "secret"})
		c, _, _ := outsideClient(t, s.Handler(), nil, 0, client.Options{})

		held, err := claim.New(db).Acquire(ctx, db, "held", "someone", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var h *claim.HeldError
		if _, err := c.Acquire(ctx, "held", "me", time.Minute); !errors.As(err, &h) || !h.Claim.Live || h.Claim.Key != "held" ||
			h.Claim.Holder != "someone" || h.Claim.Fence != held.Fence || !h.Claim.ExpiresAt.Equal(held.ExpiresAt) {
			t.Fatalf("acquire of a held key: %v (%+v); want a *claim.HeldError with the live claim %+v", err, h, held)
		}

		lim, err := quota.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []quota.Policy{
			{Kind: quota.FixedWindow, Rate: 5, Per: time.Minute},
			{Kind: quota.GCRA, Rate: 5, Per: time.Minute, Burst: 5},
		} {
			for _, n := range []int64{3, 3} {
				got, err := c.Consume(ctx, "client-"+string(p.Kind), n, p)
				if err != nil {
					t.Fatal(err)
				}
				want, err := lim.Consume(ctx, db, "library-"+string(p.Kind), n, p)
				if err != nil {
					t.Fatal(err)
				}
				if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter || !got.ResetAt.Equal(want.ResetAt) {
					t.Fatalf("%s, a charge of %d: the client's %+v, the library's %+v", p.Kind, n, got, want)
				}
			}
			if d, err := c.Consume(ctx, "client-"+string(p.Kind), 3, p); err != nil || d.Allowed || d.Remaining != 2 {
				t.Fatalf("%s, a third charge of 3: %+v, %v; want denied with 2 remaining", p.Kind, d, err)
			}
		}

		ev := dedup.Event{Source: "billing", Level: "warn", Message: "slow", Fingerprint: "slow"}
		if o, err := c.Observe(ctx, ev, time.Minute); err != nil || !o.Process || o.Fence != 1 {
			t.Fatalf("observe: %+v, %v", o, err)
		}
		clock.Advance(time.Minute)
		if o, err := c.Observe(ctx, ev, time.Minute); err != nil || !o.Process || o.Fence != 2 {
			t.Fatalf("observe a window later: %+v, %v; want the second window won, fence 2", o, err)
		}
		var stale *claim.StaleFenceError
		if err := c.Record(ctx, "slow", 1, dedup.Result{}); !errors.As(err, &stale) || stale.Key != "slow" || stale.Fence != 1 || stale.Current != 2 {
			t.Fatalf("record at the first window's fence: %v (%+v); want a *claim.StaleFenceError of fence 1, current 2", err, stale)
		}

		o, err := s.Outbox()
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]int64{}
		for _, k := range []string{"a", "b"} {
			id, err := c.Enqueue(ctx, outbox.Message{Topic: "mail", Key: k})
			if err != nil {
				t.Fatal(err)
			}
			ids[k] = id
		}
		ds, err := o.Claim(ctx, "w", 2, time.Minute, "mail")
		if err != nil || len(ds) != 2 {
			t.Fatalf("claim: %v, %v", ds, err)
		}
		for _, d := range ds {
			if _, err := o.Fail(ctx, d, outbox.Permanent(errors.New("refused"))); err != nil {
				t.Fatal(err)
			}
		}
		if rs, err := c.Dead(ctx, outbox.Filter{Topic: "mail", Key: "a"}, 0, 10); err != nil || len(rs) != 1 || rs[0].ID != ids["a"] || rs[0].Key != "a" {
			t.Fatalf("dead letters of topic mail and key a: %+v, %v; want only message %d", rs, err, ids["a"])
		}
		if rs, err := c.Dead(ctx, outbox.Filter{Topic: "mail"}, 0, 10); err != nil || len(rs) != 2 {
			t.Fatalf("dead letters of topic mail: %+v, %v; want both", rs, err)
		}
	})
}

// TestOutsideBackoffDoubles: without a Retry-After, the wait before each
// retry doubles from Backoff: four 503s under a Backoff of 100ms and a
// MaxBackoff of 10s take at least 100+200+400+800 ms before the fifth
// attempt succeeds (a lower bound, which a slow machine only lengthens;
// waits that grew by Backoff each time would take 1s).
func TestOutsideBackoffDoubles(t *testing.T) {
	t.Parallel()
	c, f, _ := outsideClient(t, heldServer(t), problem(503, "unavailable", ""), 4,
		client.Options{Attempts: 5, Backoff: 100 * time.Millisecond, MaxBackoff: 10 * time.Second})
	start := time.Now()
	got, err := c.Get(context.Background(), "held")
	took := time.Since(start)
	if err != nil || got.Holder != "someone" || f.requests() != 5 {
		t.Fatalf("four 503s: %+v, %v after %d requests; want the claim from the fifth", got, err, f.requests())
	}
	if took < 1500*time.Millisecond {
		t.Fatalf("four 503s took %v; want at least 1.5s, the backoff doubling from 100ms", took)
	}
}
