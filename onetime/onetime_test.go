package onetime_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/tenant"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	t0     = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	secret = []byte("0123456789abcdef0123456789abcdef")
)

func newStore(t testing.TB, db *racefree.DB, opts *onetime.Options) *onetime.Store {
	t.Helper()
	s, err := onetime.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// eachOnAClock runs body on each engine (testdb.Each, one after another)
// with a store made with opts, on a manual clock set to t0 as each
// engine's run begins.
func eachOnAClock(t *testing.T, opts *onetime.Options, body func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock)) {
	t.Helper()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		body(t, db, newStore(t, db, opts), clock)
	})
}

// together runs fn n times at once and returns the outcomes.
func together[T any](t *testing.T, n int, fn func() (T, error)) []T {
	t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		out   = make([]T, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = fn()
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestConcurrentRedemptionsHaveExactlyOneWinner(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t, db, nil)
		for round := range 3 {
			c, err := s.Issue(ctx, db, "password-reset", "user-42", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			rs := together(t, 64, func() (onetime.Redemption, error) {
				if round == 2 {
					// Each redemption in a caller's transaction.
					var r onetime.Redemption
					err := db.InTx(ctx, func(tx *sql.Tx) (err error) {
						r, err = s.Consume(ctx, tx, "password-reset", c.Token)
						return err
					})
					return r, err
				}
				return s.Consume(ctx, db, "password-reset", c.Token)
			})
			counts := map[onetime.Outcome]int{}
			for _, r := range rs {
				counts[r.Outcome]++
				if r.Outcome == onetime.Consumed && r.Subject != "user-42" {
					t.Errorf("consumed subject %q, want user-42", r.Subject)
				}
			}
			if got, want := counts[onetime.Consumed], 1; got != want {
				t.Fatalf("round %d: %d redemptions succeeded, want %d (%v)", round, got, want, counts)
			}
			if got, want := counts[onetime.AlreadyUsed], 63; got != want {
				t.Fatalf("round %d: %d already used, want %d (%v)", round, got, want, counts)
			}
		}
	})
}

func TestConsumeOutcomes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t, db, nil)
		other := as(t, "other")
		c, err := s.Issue(ctx, db, "verify-email", "user-1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(c.Token), 43; got != want {
			t.Fatalf("token of %d characters, want %d", got, want)
		}
		for _, tc := range []struct {
			name  string
			ctx   context.Context
			purp  string
			token string
			want  onetime.Outcome
		}{
			{"another purpose", ctx, "password-reset", c.Token, onetime.Unknown},
			{"another tenant", other, "verify-email", c.Token, onetime.Unknown},
			{"unknown token", ctx, "verify-email", c.Token[1:] + "A", onetime.Unknown},
			{"first", ctx, "verify-email", c.Token, onetime.Consumed},
			{"again", ctx, "verify-email", c.Token, onetime.AlreadyUsed},
		} {
			r, err := s.Consume(tc.ctx, db, tc.purp, tc.token)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := r.Outcome; got != tc.want {
				t.Fatalf("%s: %v, want %v", tc.name, got, tc.want)
			}
		}
		r, err := s.Consume(ctx, db, "verify-email", c.Token)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.Subject, "user-1"; got != want {
			t.Errorf("already used: subject %q, want %q", got, want)
		}

		// Revoked codes are refused; used ones stay used.
		a, _ := s.Issue(ctx, db, "verify-email", "user-1", time.Hour)
		b, _ := s.Issue(ctx, db, "verify-email", "user-1", time.Hour)
		n, err := s.RevokeCodes(ctx, db, "verify-email", "user-1")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := n, int64(2); got != want {
			t.Fatalf("revoked %d codes, want %d", got, want)
		}
		for _, tok := range []string{a.Token, b.Token} {
			r, err := s.Consume(ctx, db, "verify-email", tok)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := r.Outcome, onetime.Revoked; got != want {
				t.Fatalf("revoked code: %v, want %v", got, want)
			}
		}
		if r, _ := s.Consume(ctx, db, "verify-email", c.Token); r.Outcome != onetime.AlreadyUsed {
			t.Fatalf("used code after revocation: %v, want already_used", r.Outcome)
		}
	})
}

func TestExpiryIsTheExactMillisecond(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, &onetime.Options{Grace: 10 * time.Second, Secret: secret}, func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock) {
		ctx := context.Background()
		before, _ := s.Issue(ctx, db, "login", "u", time.Second)
		at, _ := s.Issue(ctx, db, "login", "u", time.Second)
		r1, _ := s.IssueRefresh(ctx, db, "u", time.Second)
		r2, _ := s.IssueRefresh(ctx, db, "u", time.Second)
		if got, want := before.ExpiresAt, t0.Add(time.Second); !got.Equal(want) {
			t.Fatalf("expires at %v, want %v", got, want)
		}

		clock.Set(t0.Add(999 * time.Millisecond))
		if r, _ := s.Consume(ctx, db, "login", before.Token); r.Outcome != onetime.Consumed {
			t.Fatalf("1ms before expiry: %v, want consumed", r.Outcome)
		}
		rot, _ := s.Rotate(ctx, db, r1.Token)
		if rot.Outcome != onetime.Rotated {
			t.Fatalf("1ms before expiry: %v, want rotated", rot.Outcome)
		}
		if got, want := rot.Next.ExpiresAt, t0.Add(1999*time.Millisecond); !got.Equal(want) {
			t.Fatalf("successor expires at %v, want %v (ttl from the rotation)", got, want)
		}

		clock.Set(t0.Add(time.Second))
		if r, _ := s.Consume(ctx, db, "login", at.Token); r.Outcome != onetime.Expired {
			t.Fatalf("at expiry: %v, want expired", r.Outcome)
		}
		if rot, _ := s.Rotate(ctx, db, r2.Token); rot.Outcome != onetime.Expired {
			t.Fatalf("at expiry: %v, want expired", rot.Outcome)
		}

		// Within the grace window, but after the successor expired.
		clock.Set(t0.Add(999*time.Millisecond + 10*time.Second - time.Millisecond))
		if rot, _ := s.Rotate(ctx, db, r1.Token); rot.Outcome != onetime.Reused {
			// The successor expired 1999ms after t0: a dead token is never replayed.
			t.Fatalf("retry after the successor expired: %v, want reused", rot.Outcome)
		}
	})
}

func TestGraceWindowEndsAtTheExactMillisecond(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, &onetime.Options{Grace: 5 * time.Second, Secret: secret}, func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock) {
		ctx := context.Background()
		first, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
		second, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
		rot1, _ := s.Rotate(ctx, db, first.Token)
		rot2, _ := s.Rotate(ctx, db, second.Token)
		if rot1.Outcome != onetime.Rotated || rot2.Outcome != onetime.Rotated {
			t.Fatalf("rotations: %v %v", rot1.Outcome, rot2.Outcome)
		}
		clock.Set(t0.Add(5*time.Second - time.Millisecond))
		retry, err := s.Rotate(ctx, db, first.Token)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := retry.Outcome, onetime.Replayed; got != want {
			t.Fatalf("retry 1ms inside the grace window: %v, want %v", got, want)
		}
		if got, want := retry.Next.Token, rot1.Next.Token; got != want {
			t.Fatalf("retry got successor %q, want the same %q", got, want)
		}
		if got, want := retry.Next.Generation, int64(2); got != want {
			t.Fatalf("retry generation %d, want %d", got, want)
		}
		clock.Set(t0.Add(5 * time.Second))
		if rot, _ := s.Rotate(ctx, db, second.Token); rot.Outcome != onetime.Reused {
			t.Fatalf("retry at the end of the grace window: %v, want reused", rot.Outcome)
		}
		if rot, _ := s.Rotate(ctx, db, rot2.Next.Token); rot.Outcome != onetime.Revoked {
			t.Fatalf("successor after reuse: %v, want revoked", rot.Outcome)
		}
	})
}

func TestConcurrentRotationsNeverMakeTwoSuccessors(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		for _, c := range []struct {
			grace time.Duration
			inTx  bool // each rotation in a caller's transaction
		}{{0, false}, {time.Minute, false}, {0, true}, {time.Minute, true}} {
			grace := c.grace
			s := newStore(t, db, &onetime.Options{Grace: grace, Secret: secret})
			r, err := s.IssueRefresh(ctx, db, "user-7", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			rots := together(t, 64, func() (onetime.Rotation, error) {
				if !c.inTx {
					return s.Rotate(ctx, db, r.Token)
				}
				var rot onetime.Rotation
				err := db.InTx(ctx, func(tx *sql.Tx) (err error) {
					rot, err = s.Rotate(ctx, tx, r.Token)
					return err
				})
				return rot, err
			})
			counts := map[onetime.Outcome]int{}
			successors := map[string]bool{}
			for _, rot := range rots {
				counts[rot.Outcome]++
				if rot.Next != nil {
					successors[rot.Next.Token] = true
				}
			}
			if got, want := counts[onetime.Rotated], 1; got != want {
				t.Fatalf("grace %s: %d rotations, want %d (%v)", grace, got, want, counts)
			}
			if got, want := len(successors), 1; got != want {
				t.Fatalf("grace %s: %d distinct successors, want %d", grace, got, want)
			}
			var next string
			for tok := range successors {
				next = tok
			}
			after, err := s.Rotate(ctx, db, next)
			if err != nil {
				t.Fatal(err)
			}
			if grace == 0 {
				// Every loser is reuse: the family is revoked, successor included.
				if got, want := counts[onetime.Reused]+counts[onetime.Revoked], 63; got != want {
					t.Fatalf("grace 0: %d reused or revoked, want %d (%v)", got, want, counts)
				}
				if counts[onetime.Reused] < 1 {
					t.Fatalf("grace 0: no loser revoked the family (%v)", counts)
				}
				if got, want := after.Outcome, onetime.Revoked; got != want {
					t.Fatalf("grace 0: successor %v, want %v", got, want)
				}
				continue
			}
			if got, want := counts[onetime.Replayed], 63; got != want {
				t.Fatalf("grace: %d replayed, want %d (%v)", got, want, counts)
			}
			if got, want := after.Outcome, onetime.Rotated; got != want {
				t.Fatalf("grace: successor %v, want %v", got, want)
			}
		}
	})
}

func TestReuseRevokesTheWholeFamily(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t, db, &onetime.Options{Grace: time.Hour, Secret: secret})
		mustRotate := func(tok string) string {
			t.Helper()
			rot, err := s.Rotate(ctx, db, tok)
			if err != nil {
				t.Fatal(err)
			}
			if rot.Outcome != onetime.Rotated {
				t.Fatalf("rotate: %v, want rotated", rot.Outcome)
			}
			return rot.Next.Token
		}
		for _, tc := range []struct {
			name  string
			reuse func(gen []string) string // the retired token presented again
		}{
			{"grandparent", func(gen []string) string { return gen[0] }},
			// Within the grace window, but its successor was rotated since.
			{"parent of a rotated successor", func(gen []string) string { return gen[1] }},
		} {
			other, _ := s.IssueRefresh(ctx, db, "bystander", time.Hour)
			first, err := s.IssueRefresh(ctx, db, "victim", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			gen := []string{first.Token}
			for range 3 {
				gen = append(gen, mustRotate(gen[len(gen)-1]))
			}
			var rot onetime.Rotation
			// The revocation commits in the caller's transaction that
			// returns Rotate's error.
			err = db.InTx(ctx, func(tx *sql.Tx) (err error) {
				rot, err = s.Rotate(ctx, tx, tc.reuse(gen))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := rot.Outcome, onetime.Reused; got != want {
				t.Fatalf("%s: %v, want %v", tc.name, got, want)
			}
			for i, tok := range gen {
				rot, err := s.Rotate(ctx, db, tok)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := rot.Outcome, onetime.Revoked; got != want {
					t.Fatalf("%s: generation %d after reuse: %v, want %v", tc.name, i+1, got, want)
				}
			}
			if got := mustRotate(other.Token); got == "" {
				t.Fatal("another family was affected")
			}
		}
	})
}

func TestRevokeFamilies(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t, db, nil)
		a, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
		b, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
		c, _ := s.IssueRefresh(ctx, db, "v", time.Hour)
		n, err := s.RevokeFamilies(ctx, db, "u")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := n, int64(2); got != want {
			t.Fatalf("revoked %d, want %d", got, want)
		}
		for tok, want := range map[string]onetime.Outcome{a.Token: onetime.Revoked, b.Token: onetime.Revoked, c.Token: onetime.Rotated} {
			rot, err := s.Rotate(ctx, db, tok)
			if err != nil {
				t.Fatal(err)
			}
			if got := rot.Outcome; got != want {
				t.Fatalf("%v, want %v", got, want)
			}
		}
		if rot, _ := s.Rotate(ctx, db, "no-such-token"); rot.Outcome != onetime.Unknown {
			t.Fatalf("unknown token: %v, want unknown", rot.Outcome)
		}
	})
}

// TestOnlyTheHashIsStored reads every column of every row of the token
// tables and finds neither a token nor its raw bytes, and finds each
// token's SHA-256.
func TestOnlyTheHashIsStored(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t, db, &onetime.Options{Grace: time.Hour, Secret: secret})
		c, _ := s.Issue(ctx, db, "login", "u", time.Hour)
		used, _ := s.Issue(ctx, db, "login", "u", time.Hour)
		if r, _ := s.Consume(ctx, db, "login", used.Token); r.Outcome != onetime.Consumed {
			t.Fatal(r.Outcome)
		}
		r, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
		rot, _ := s.Rotate(ctx, db, r.Token)
		if rot.Outcome != onetime.Rotated {
			t.Fatal(rot.Outcome)
		}
		tokens := []string{c.Token, used.Token, r.Token, rot.Next.Token}
		var cells [][]byte
		for _, table := range []string{"racefree_onetime_codes", "racefree_refresh_families", "racefree_refresh_retired"} {
			rows, err := db.QueryContext(ctx, `SELECT * FROM `+table)
			if err != nil {
				t.Fatal(err)
			}
			cols, _ := rows.Columns()
			for rows.Next() {
				vals := make([]any, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					t.Fatal(err)
				}
				for _, v := range vals {
					switch v := v.(type) {
					case []byte:
						cells = append(cells, v)
					case string:
						cells = append(cells, []byte(v))
					}
				}
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
		}
		for _, tok := range tokens {
			sum := sha256.Sum256([]byte(tok))
			found := false
			for _, cell := range cells {
				if bytes.Contains(cell, []byte(tok)) || bytes.Contains(cell, []byte(tok)[:16]) {
					t.Fatalf("token %q is stored in clear (%q)", tok, cell)
				}
				found = found || bytes.Equal(cell, sum[:])
			}
			if !found {
				t.Fatalf("the SHA-256 of token %q is not stored", tok)
			}
		}
	})
}

// counter counts the statements sent through an executor.
type counter struct {
	racefree.Executor
	n int
}

func (c *counter) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	c.n++
	return c.Executor.ExecContext(ctx, q, args...)
}

func (c *counter) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	c.n++
	return c.Executor.QueryContext(ctx, q, args...)
}

func (c *counter) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	c.n++
	return c.Executor.QueryRowContext(ctx, q, args...)
}

// TestRoundTrips counts the statements of each operation in a transaction
// of tenant.InTx, which has set the tenant already: on SQLite through a
// counting executor, on PostgreSQL on the wire (a pgx tracer sees every
// statement the connection sends, BEGIN and COMMIT included). Through the
// pool on PostgreSQL an operation adds BEGIN, the tenant's set_config and
// COMMIT.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	for _, engine := range testdb.Engines {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, sent := countingDB(t, engine)
			s := newStore(t, db, &onetime.Options{Grace: time.Minute, Secret: secret})
			code, _ := s.Issue(ctx, db, "login", "u", time.Hour)
			r, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
			rotate, next := 1, ""
			if db.Engine() == racefree.SQLite {
				rotate = 2
			}
			for _, tc := range []struct {
				name string
				op   func(ctx context.Context, exec racefree.Executor) onetime.Outcome
				want onetime.Outcome
				max  int
			}{
				{"consume", func(ctx context.Context, e racefree.Executor) onetime.Outcome {
					red, _ := s.Consume(ctx, e, "login", code.Token)
					return red.Outcome
				}, onetime.Consumed, 1},
				{"rotate", func(ctx context.Context, e racefree.Executor) onetime.Outcome {
					rot, _ := s.Rotate(ctx, e, r.Token)
					return rot.Outcome
				}, onetime.Rotated, rotate},
				{"retry in the grace window", func(ctx context.Context, e racefree.Executor) onetime.Outcome {
					rot, _ := s.Rotate(ctx, e, r.Token)
					next = rot.Next.Token
					return rot.Outcome
				}, onetime.Replayed, 2},
				{"rotate the successor", func(ctx context.Context, e racefree.Executor) onetime.Outcome {
					rot, _ := s.Rotate(ctx, e, next)
					return rot.Outcome
				}, onetime.Rotated, rotate},
				{"reuse", func(ctx context.Context, e racefree.Executor) onetime.Outcome {
					rot, _ := s.Rotate(ctx, e, r.Token)
					return rot.Outcome
				}, onetime.Reused, 2},
			} {
				err := tenant.InTx(ctx, db, tenant.Default, func(ctx context.Context, tx *sql.Tx) error {
					c := &counter{Executor: tx}
					var exec racefree.Executor = c
					if sent != nil {
						exec = tx // the tracer counts; a wrapper would hide the transaction
					}
					before := statements(sent, c)
					if got := tc.op(ctx, exec); got != tc.want {
						return errors.New(tc.name + ": " + got.String() + ", want " + tc.want.String())
					}
					n := statements(sent, c) - before
					if n < 1 || n > int64(tc.max) {
						return fmt.Errorf("%s: %d statements, want 1 to %d", tc.name, n, tc.max)
					}
					t.Logf("%s: %d statement(s)", tc.name, n)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if sent != nil {
				// Through the pool: BEGIN, set_config, the UPDATE, COMMIT.
				c2, _ := s.Issue(ctx, db, "login", "u", time.Hour)
				before := sent.Load()
				if red, err := s.Consume(ctx, db, "login", c2.Token); err != nil || red.Outcome != onetime.Consumed {
					t.Fatalf("consume through the pool: %v %v", red.Outcome, err)
				}
				n := sent.Load() - before
				if n < 1 || n > 4 {
					t.Fatalf("consume through the pool: %d statements, want 1 to 4", n)
				}
				t.Logf("consume through the pool: %d statements", n)
			}
		})
	}
}

func statements(sent *atomic.Int64, c *counter) int64 {
	if sent != nil {
		return sent.Load()
	}
	return int64(c.n)
}

func TestConsumeRollsBackWithTheCallersTransaction(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t, db, nil)
		c, _ := s.Issue(ctx, db, "login", "u", time.Hour)
		r, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
		rollback := errors.New("rollback")
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if red, err := s.Consume(ctx, tx, "login", c.Token); err != nil || red.Outcome != onetime.Consumed {
				t.Fatalf("%v %v", red.Outcome, err)
			}
			if rot, err := s.Rotate(ctx, tx, r.Token); err != nil || rot.Outcome != onetime.Rotated {
				t.Fatalf("%v %v", rot.Outcome, err)
			}
			return rollback
		})
		if !errors.Is(err, rollback) {
			t.Fatal(err)
		}
		if red, _ := s.Consume(ctx, db, "login", c.Token); red.Outcome != onetime.Consumed {
			t.Fatalf("after rollback: %v, want consumed", red.Outcome)
		}
		if rot, _ := s.Rotate(ctx, db, r.Token); rot.Outcome != onetime.Rotated {
			t.Fatalf("after rollback: %v, want rotated", rot.Outcome)
		}
	})
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t, db, nil)
		long := strings.Repeat("x", 600)
		checks := []struct {
			name string
			err  error
		}{}
		add := func(name string, err error) {
			checks = append(checks, struct {
				name string
				err  error
			}{name, err})
		}
		_, err := s.Issue(ctx, db, "", "u", time.Hour)
		add("empty purpose", err)
		_, err = s.Issue(ctx, db, "p", "u\x00", time.Hour)
		add("NUL subject", err)
		_, err = s.Issue(ctx, db, "p", "\xff", time.Hour)
		add("invalid UTF-8 subject", err)
		_, err = s.Issue(ctx, db, "p", "u", 0)
		add("zero ttl", err)
		_, err = s.Issue(ctx, db, "p", "u", 1500*time.Microsecond)
		add("fractional ttl", err)
		_, err = s.IssueRefresh(ctx, db, long, time.Hour)
		add("long subject", err)
		_, err = s.Consume(ctx, db, "p", "")
		add("empty token", err)
		_, err = s.Consume(ctx, db, "p", long)
		add("long token", err)
		_, err = s.Rotate(ctx, db, "a\x00b")
		add("NUL token", err)
		_, err = s.RevokeCodes(ctx, db, "p", "")
		add("empty subject", err)
		_, err = s.RevokeFamilies(ctx, db, "")
		add("empty family subject", err)
		for _, c := range checks {
			var ie *racefree.InputError
			if !errors.As(c.err, &ie) {
				t.Errorf("%s: %v, want an InputError", c.name, c.err)
			}
		}
		for _, table := range []string{"racefree_onetime_codes", "racefree_refresh_families", "racefree_refresh_retired"} {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("%s has %d rows after bad input, want 0", table, n)
			}
		}
	})
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	for _, o := range []onetime.Options{
		{Grace: time.Second},
		{Grace: time.Second, Secret: []byte("short")},
		{Grace: -time.Second},
		{Grace: 2 * time.Hour, Secret: secret},
		{Grace: 1500 * time.Microsecond, Secret: secret},
	} {
		if _, err := onetime.New(db, &o); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("%+v: %v, want an InputError", o, err)
		}
	}
	if _, err := onetime.New(db, nil); err != nil {
		t.Fatal(err)
	}
}

func TestReapForgetsOnlyWhatCanNoLongerBeUsed(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, nil, func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock) {
		ctx := context.Background()
		other := as(t, "other")
		var short, long []string
		for range 5 {
			c, _ := s.Issue(ctx, db, "login", "u", time.Second)
			short = append(short, c.Token)
			c, _ = s.Issue(ctx, db, "login", "u", time.Hour)
			long = append(long, c.Token)
		}
		otherCode, _ := s.Issue(other, db, "login", "u", time.Second)
		otherLive, _ := s.Issue(other, db, "login", "u", time.Hour)
		dead, _ := s.IssueRefresh(ctx, db, "u", time.Second)
		rot, _ := s.Rotate(ctx, db, dead.Token) // retires dead.Token; the successor lives 1s too
		live, _ := s.IssueRefresh(ctx, db, "u", time.Second)
		clock.Set(t0.Add(500 * time.Millisecond))
		liveRot, _ := s.Rotate(ctx, db, live.Token) // moves its expiry to t0+1.5s

		clock.Set(t0.Add(time.Second + 100*time.Millisecond))
		// Within the grace of 100ms: nothing yet.
		if c, f, err := s.Reap(ctx, 101*time.Millisecond, 2); err != nil || c != 0 || f != 0 {
			t.Fatalf("reap within the grace: %d codes, %d families, %v; want none", c, f, err)
		}
		c, f, err := s.Reap(ctx, 100*time.Millisecond, 2) // batches of 2: several rounds
		if err != nil {
			t.Fatal(err)
		}
		if c != 6 || f != 1 {
			t.Fatalf("reaped %d codes and %d families, want 6 (5 of the default tenant, 1 of another) and 1", c, f)
		}
		for _, tok := range short {
			if r, _ := s.Consume(ctx, db, "login", tok); r.Outcome != onetime.Unknown {
				t.Fatalf("reaped code: %v, want unknown", r.Outcome)
			}
		}
		for _, tok := range long {
			if r, _ := s.Consume(ctx, db, "login", tok); r.Outcome != onetime.Consumed {
				t.Fatalf("live code after a reap: %v, want consumed", r.Outcome)
			}
		}
		// Every tenant is reaped, each of its own expired codes only.
		if r, _ := s.Consume(other, db, "login", otherCode.Token); r.Outcome != onetime.Unknown {
			t.Fatalf("another tenant's expired code: %v, want unknown (reaped)", r.Outcome)
		}
		if r, _ := s.Consume(other, db, "login", otherLive.Token); r.Outcome != onetime.Consumed {
			t.Fatalf("another tenant's live code after a reap: %v, want consumed", r.Outcome)
		}
		for _, tok := range []string{dead.Token, rot.Next.Token} {
			if r, _ := s.Rotate(ctx, db, tok); r.Outcome != onetime.Unknown {
				t.Fatalf("reaped family: %v, want unknown", r.Outcome)
			}
		}
		if r, _ := s.Rotate(ctx, db, liveRot.Next.Token); r.Outcome != onetime.Rotated {
			t.Fatalf("the rotated family after a reap: %v, want rotated", r.Outcome)
		}
		var retired int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_refresh_retired`).Scan(&retired); err != nil {
			t.Fatal(err)
		}
		if got, want := retired, 2; got != want { // live's first and second tokens
			t.Fatalf("%d retired tokens left, want %d (the reaped family's are gone)", got, want)
		}
	})
}

// TestEdgesReapFamiliesPastABatchAndOnTheEnginesClock: Reap goes on
// round after round while a round fills its batch, so a batch of exactly
// n families is followed by another (five families in batches of two: 2,
// 2, then 1), and without a Config.Clock it reads the engine's own clock,
// on SQLite with a statement of its own, and reaps a family whose head
// expired an hour ago (moved there by hand: the test waits for no clock).
func TestEdgesReapFamiliesPastABatchAndOnTheEnginesClock(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	t.Run("rounds", func(t *testing.T) {
		testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
			ctx := context.Background()
			clock.Set(t0)
			s := newStore(t, db, nil)
			for range 5 {
				if _, err := s.IssueRefresh(ctx, db, "u", time.Second); err != nil {
					t.Fatal(err)
				}
			}
			clock.Set(t0.Add(2 * time.Second))
			if c, f, err := s.Reap(ctx, 0, 2); err != nil || c != 0 || f != 5 {
				t.Fatalf("reaped %d codes, %d families (%v); want 0 and 5, in rounds of 2, 2 and 1", c, f, err)
			}
		})
	})
	t.Run("engine clock", func(t *testing.T) {
		testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
			ctx := context.Background()
			s := newStore(t, db, nil)
			if _, err := s.IssueRefresh(ctx, db, "u", time.Hour); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Reap(ctx, 0, 0); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM racefree_refresh_families`).Scan(&n); err != nil || n != 1 {
				t.Fatalf("%d families after a reap of none expired (%v), want 1", n, err)
			}
			if _, err := db.ExecContext(ctx, `UPDATE racefree_refresh_families SET head_expires_at = head_expires_at - 7200000`); err != nil {
				t.Fatal(err)
			}
			if c, f, err := s.Reap(ctx, 0, 0); err != nil || c != 0 || f != 1 {
				t.Fatalf("reaped %d codes, %d families (%v) on the engine's clock; want 0 and 1", c, f, err)
			}
		})
	})
}

// TestNeedsTheTenantsMigration: before migration 011 every operation is
// ErrSchemaOutdated and writes nothing; at 011 the same Store works for
// the default tenant, while another tenant needs 012.
func TestNeedsTheTenantsMigration(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if _, err := db.MigrateUpTo(ctx, 10); err != nil {
			t.Fatal(err)
		}
		s := newStore(t, db, nil)
		ops := func(ctx context.Context) []error {
			_, err1 := s.Issue(ctx, db, "p", "u", time.Hour)
			_, err2 := s.Consume(ctx, db, "p", "token")
			_, err3 := s.IssueRefresh(ctx, db, "u", time.Hour)
			_, err4 := s.Rotate(ctx, db, "token")
			_, err5 := s.RevokeCodes(ctx, db, "p", "u")
			_, err6 := s.RevokeFamilies(ctx, db, "u")
			return []error{err1, err2, err3, err4, err5, err6}
		}
		_, _, err := s.Reap(ctx, 0, 0)
		for i, err := range append(ops(ctx), err) {
			if !errors.Is(err, racefree.ErrSchemaOutdated) {
				t.Errorf("operation %d at schema 10: %v, want ErrSchemaOutdated", i+1, err)
			}
		}
		if n := rows(t, db, ""); n != 0 {
			t.Fatalf("%d rows written at schema 10, want none", n)
		}
		if _, err := db.MigrateUpTo(ctx, 11); err != nil {
			t.Fatal(err)
		}
		c, err := s.Issue(ctx, db, "p", "u", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := s.Consume(ctx, db, "p", c.Token); err != nil || r.Outcome != onetime.Consumed {
			t.Fatalf("default tenant at schema 11: %v %v", r.Outcome, err)
		}
		if _, _, err := s.Reap(ctx, 0, 0); err != nil {
			t.Fatalf("reap at schema 11: %v", err)
		}
		acme := as(t, "acme")
		for i, err := range ops(acme) {
			if !errors.Is(err, racefree.ErrSchemaOutdated) {
				t.Errorf("operation %d of another tenant at schema 11: %v, want ErrSchemaOutdated", i+1, err)
			}
		}
		if n := rows(t, db, "acme"); n != 0 {
			t.Fatalf("%d rows of another tenant written at schema 11, want none", n)
		}
		if _, err := db.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		c, err = s.Issue(acme, db, "p", "u", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := s.Consume(acme, db, "p", c.Token); err != nil || r.Outcome != onetime.Consumed {
			t.Fatalf("another tenant at schema 12: %v %v", r.Outcome, err)
		}
	})
}
