package onetime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/onetime"
)

// TestOutsideARevokedTokenStaysRevokedPastItsExpiry: a refusal names the
// first reason of used, revoked, expired: a revoked family is Revoked at
// its head's exact expiry millisecond and after it, its retired token
// too, and so is a revoked code; a used code stays AlreadyUsed; only a
// token that is merely out of time is Expired. On both engines, on a
// manual clock.
func TestOutsideARevokedTokenStaysRevokedPastItsExpiry(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, nil, func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock) {
		ctx := context.Background()
		revoked, _ := s.IssueRefresh(ctx, db, "u", time.Second)
		rot, err := s.Rotate(ctx, db, revoked.Token) // the successor also expires at t0+1s
		if err != nil || rot.Outcome != onetime.Rotated {
			t.Fatalf("rotate: %v, %v; want rotated", rot.Outcome, err)
		}
		plain, _ := s.IssueRefresh(ctx, db, "v", time.Second)
		if n, err := s.RevokeFamilies(ctx, db, "u"); err != nil || n != 1 {
			t.Fatalf("revoked %d families (%v), want 1", n, err)
		}
		used, _ := s.Issue(ctx, db, "login", "u", time.Second)
		if r, _ := s.Consume(ctx, db, "login", used.Token); r.Outcome != onetime.Consumed {
			t.Fatalf("consume: %v, want consumed", r.Outcome)
		}
		gone, _ := s.Issue(ctx, db, "login", "u", time.Second)
		if n, err := s.RevokeCodes(ctx, db, "login", "u"); err != nil || n != 1 {
			t.Fatalf("revoked %d codes (%v), want 1", n, err)
		}
		late, _ := s.Issue(ctx, db, "login", "v", time.Second)

		for _, at := range []time.Duration{time.Second, time.Hour} {
			clock.Set(t0.Add(at))
			for name, tc := range map[string]struct {
				token string
				want  onetime.Outcome
			}{
				"the revoked family's head":    {rot.Next.Token, onetime.Revoked},
				"the revoked family's retired": {revoked.Token, onetime.Revoked},
				"a family out of time":         {plain.Token, onetime.Expired},
			} {
				r, err := s.Rotate(ctx, db, tc.token)
				if err != nil || r.Outcome != tc.want || r.Next != nil {
					t.Errorf("%s expired by %s: %v, %v, next %v; want %v", name, at-time.Second, r.Outcome, err, r.Next, tc.want)
				}
			}
			for name, tc := range map[string]struct {
				token string
				want  onetime.Outcome
			}{
				"a used code":        {used.Token, onetime.AlreadyUsed},
				"a revoked code":     {gone.Token, onetime.Revoked},
				"a code out of time": {late.Token, onetime.Expired},
			} {
				r, err := s.Consume(ctx, db, "login", tc.token)
				if err != nil || r.Outcome != tc.want {
					t.Errorf("%s expired by %s: %v, %v; want %v", name, at-time.Second, r.Outcome, err, tc.want)
				}
			}
		}
	})
}

// TestOutsideTokensAtMaxTokenBytes: Consume and Rotate take a token of
// exactly MaxTokenBytes (no such token: Unknown, no error) and refuse one
// byte more with an InputError, writing nothing, on both engines.
func TestOutsideTokensAtMaxTokenBytes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t, db, nil)
		at := strings.Repeat("t", onetime.MaxTokenBytes)
		past := at + "t"
		if r, err := s.Consume(ctx, db, "login", at); err != nil || r.Outcome != onetime.Unknown {
			t.Errorf("Consume of %d bytes: %v, %v; want unknown", len(at), r.Outcome, err)
		}
		if r, err := s.Rotate(ctx, db, at); err != nil || r.Outcome != onetime.Unknown {
			t.Errorf("Rotate of %d bytes: %v, %v; want unknown", len(at), r.Outcome, err)
		}
		if _, err := s.Consume(ctx, db, "login", past); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("Consume of %d bytes: %v; want an InputError", len(past), err)
		}
		if _, err := s.Rotate(ctx, db, past); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("Rotate of %d bytes: %v; want an InputError", len(past), err)
		}
		for _, table := range []string{"racefree_onetime_codes", "racefree_refresh_families", "racefree_refresh_retired"} {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 0 {
				t.Errorf("%s has %d rows (%v), want 0", table, n, err)
			}
		}
	})
}

// TestOutsideRevokingAgainRevokesNothing: RevokeFamilies and RevokeCodes
// count only what they revoke: run again they return 0 and leave the
// first revocation's time as it was; a family revoked by reuse is not
// counted either; the tokens stay Revoked. On both engines, on a manual
// clock.
func TestOutsideRevokingAgainRevokesNothing(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, nil, func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock) {
		ctx := context.Background()
		a, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
		reused, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
		if r, _ := s.Rotate(ctx, db, reused.Token); r.Outcome != onetime.Rotated {
			t.Fatalf("rotate: %v, want rotated", r.Outcome)
		}
		if r, _ := s.Rotate(ctx, db, reused.Token); r.Outcome != onetime.Reused {
			t.Fatalf("reuse: %v, want reused", r.Outcome)
		}
		c, _ := s.Issue(ctx, db, "login", "u", time.Hour)
		clock.Set(t0.Add(time.Second))
		if n, err := s.RevokeFamilies(ctx, db, "u"); err != nil || n != 1 {
			t.Fatalf("first RevokeFamilies: %d (%v), want 1 (the family revoked by reuse is not counted)", n, err)
		}
		if n, err := s.RevokeCodes(ctx, db, "login", "u"); err != nil || n != 1 {
			t.Fatalf("first RevokeCodes: %d (%v), want 1", n, err)
		}
		clock.Set(t0.Add(2 * time.Second))
		if n, err := s.RevokeFamilies(ctx, db, "u"); err != nil || n != 0 {
			t.Errorf("RevokeFamilies again: %d (%v), want 0", n, err)
		}
		if n, err := s.RevokeCodes(ctx, db, "login", "u"); err != nil || n != 0 {
			t.Errorf("RevokeCodes again: %d (%v), want 0", n, err)
		}
		for table, want := range map[string]int64{
			"racefree_refresh_families": t0.Add(time.Second).UnixMilli(),
			"racefree_onetime_codes":    t0.Add(time.Second).UnixMilli(),
		} {
			var n int
			if err := db.QueryRowContext(ctx, bind(db, `SELECT count(*) FROM `+table+` WHERE revoked_at <> $1`), want).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if table == "racefree_refresh_families" {
				n-- // the family revoked by reuse, at t0
			}
			if n != 0 {
				t.Errorf("%s: %d rows revoked at another time than the first revocation's", table, n)
			}
		}
		if r, _ := s.Rotate(ctx, db, a.Token); r.Outcome != onetime.Revoked {
			t.Errorf("a revoked family: %v, want revoked", r.Outcome)
		}
		if r, _ := s.Consume(ctx, db, "login", c.Token); r.Outcome != onetime.Revoked {
			t.Errorf("a revoked code: %v, want revoked", r.Outcome)
		}
	})
}
