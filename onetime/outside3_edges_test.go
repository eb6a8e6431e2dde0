package onetime_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/onetime"
)

// TestOutside3EdgesTheSecretIsCopied: New keeps a copy of
// Options.Secret, so a caller that reuses or wipes its buffer afterwards
// changes nothing: a retry within the grace window still gets the same
// successor back (Replayed), not Reused. On both engines, on a manual
// clock.
func TestOutside3EdgesTheSecretIsCopied(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		clock.Set(t0)
		ctx := context.Background()
		buf := append([]byte(nil), secret...)
		s := newStore(t, db, &onetime.Options{Grace: time.Minute, Secret: buf})
		r, err := s.IssueRefresh(ctx, db, "u", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		rot, err := s.Rotate(ctx, db, r.Token)
		if err != nil || rot.Outcome != onetime.Rotated {
			t.Fatalf("rotate: %v, %v; want rotated", rot.Outcome, err)
		}
		for i := range buf {
			buf[i] = 0
		}
		clock.Set(t0.Add(time.Second))
		retry, err := s.Rotate(ctx, db, r.Token)
		if err != nil || retry.Outcome != onetime.Replayed || retry.Next.Token != rot.Next.Token {
			t.Fatalf("retry after the caller wiped its Secret buffer: %+v, %v; want replayed, the same successor", retry, err)
		}
	})
}

// TestOutside3EdgesAnswersCarryTheirTimes: every answer carries what is
// documented of it, at the times the manual clock set: Consumed its
// subject, IssuedAt, ExpiresAt and UsedAt (the redemption's time, not the
// issue's); AlreadyUsed the same and the first redemption's UsedAt;
// Revoked and Expired IssuedAt and ExpiresAt, without a UsedAt. Replayed
// hands back the successor with the expiry it was given at its rotation;
// Reused, and every refusal after it, has no Next. On both engines.
func TestOutside3EdgesAnswersCarryTheirTimes(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, &onetime.Options{Grace: time.Minute, Secret: secret}, func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock) {
		ctx := context.Background()
		used, _ := s.Issue(ctx, db, "login", "u", time.Hour)
		revoked, _ := s.Issue(ctx, db, "reset", "u", time.Hour)
		late, _ := s.Issue(ctx, db, "verify", "u", time.Second)
		fam, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
		if used == nil || revoked == nil || late == nil || fam == nil {
			t.Fatal("issue failed")
		}
		check := func(name string, r onetime.Redemption, want onetime.Outcome, ttl time.Duration, usedAt time.Time) {
			t.Helper()
			if r.Outcome != want || r.Subject != "u" || !r.IssuedAt.Equal(t0) || !r.ExpiresAt.Equal(t0.Add(ttl)) || !r.UsedAt.Equal(usedAt) {
				t.Errorf("%s: %+v; want %v of u, issued %v, expiring %v, used %v", name, r, want, t0, t0.Add(ttl), usedAt)
			}
		}

		clock.Set(t0.Add(time.Second))
		r, err := s.Consume(ctx, db, "login", used.Token)
		if err != nil {
			t.Fatal(err)
		}
		check("the redemption", r, onetime.Consumed, time.Hour, t0.Add(time.Second))
		if n, err := s.RevokeCodes(ctx, db, "reset", "u"); err != nil || n != 1 {
			t.Fatalf("revoked %d codes (%v), want 1", n, err)
		}
		rot, err := s.Rotate(ctx, db, fam.Token)
		if err != nil || rot.Outcome != onetime.Rotated {
			t.Fatalf("rotate: %v, %v; want rotated", rot.Outcome, err)
		}
		next := rot.Next

		clock.Set(t0.Add(2 * time.Second))
		r, _ = s.Consume(ctx, db, "login", used.Token)
		check("the code used again", r, onetime.AlreadyUsed, time.Hour, t0.Add(time.Second))
		r, _ = s.Consume(ctx, db, "reset", revoked.Token)
		check("the revoked code", r, onetime.Revoked, time.Hour, time.Time{})
		r, _ = s.Consume(ctx, db, "verify", late.Token)
		check("the expired code", r, onetime.Expired, time.Second, time.Time{})

		retry, err := s.Rotate(ctx, db, fam.Token)
		if err != nil || retry.Outcome != onetime.Replayed || retry.Next == nil {
			t.Fatalf("retry within the grace window: %+v, %v; want replayed", retry, err)
		}
		if got := retry.Next; got.Token != next.Token || got.Subject != "u" || got.Generation != 2 || !got.ExpiresAt.Equal(t0.Add(time.Second+time.Hour)) {
			t.Errorf("replayed successor %+v; want %+v, expiring an hour after its rotation", *got, *next)
		}

		clock.Set(t0.Add(time.Second + time.Minute)) // the grace window is over
		reuse, err := s.Rotate(ctx, db, fam.Token)
		if err != nil || reuse.Outcome != onetime.Reused || reuse.Next != nil {
			t.Errorf("retry past the grace window: %+v, %v; want reused, no Next", reuse, err)
		}
		for _, tok := range []string{fam.Token, next.Token} {
			if r, err := s.Rotate(ctx, db, tok); err != nil || r.Outcome != onetime.Revoked || r.Next != nil {
				t.Errorf("a token of the family revoked by reuse: %+v, %v; want revoked, no Next", r, err)
			}
		}
	})
}

// TestOutside3EdgesSubjectsAtMaxSubjectBytes: a subject of exactly
// MaxSubjectBytes is taken by Issue, IssueRefresh, RevokeCodes and
// RevokeFamilies alike (what one issues the others can revoke), and one
// byte more is an InputError from each of them, which writes nothing. On
// both engines.
func TestOutside3EdgesSubjectsAtMaxSubjectBytes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t, db, nil)
		at := strings.Repeat("s", onetime.MaxSubjectBytes)
		past := at + "s"
		c, err := s.Issue(ctx, db, "reset", at, time.Hour)
		if err != nil {
			t.Fatalf("Issue for a subject of %d bytes: %v", len(at), err)
		}
		r, err := s.IssueRefresh(ctx, db, at, time.Hour)
		if err != nil {
			t.Fatalf("IssueRefresh for a subject of %d bytes: %v", len(at), err)
		}
		if n, err := s.RevokeCodes(ctx, db, "reset", at); err != nil || n != 1 {
			t.Errorf("RevokeCodes for a subject of %d bytes: %d, %v; want 1", len(at), n, err)
		}
		if n, err := s.RevokeFamilies(ctx, db, at); err != nil || n != 1 {
			t.Errorf("RevokeFamilies for a subject of %d bytes: %d, %v; want 1", len(at), n, err)
		}
		if red, _ := s.Consume(ctx, db, "reset", c.Token); red.Outcome != onetime.Revoked {
			t.Errorf("the revoked code: %v, want revoked", red.Outcome)
		}
		if rot, _ := s.Rotate(ctx, db, r.Token); rot.Outcome != onetime.Revoked {
			t.Errorf("the revoked family: %v, want revoked", rot.Outcome)
		}
		_, e1 := s.Issue(ctx, db, "reset", past, time.Hour)
		_, e2 := s.IssueRefresh(ctx, db, past, time.Hour)
		_, e3 := s.RevokeCodes(ctx, db, "reset", past)
		_, e4 := s.RevokeFamilies(ctx, db, past)
		for i, err := range []error{e1, e2, e3, e4} {
			if !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("call %d with a subject of %d bytes: %v; want an InputError", i+1, len(past), err)
			}
		}
		for table, want := range map[string]int{"racefree_onetime_codes": 1, "racefree_refresh_families": 1} {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != want {
				t.Errorf("%s has %d rows (%v), want %d", table, n, err, want)
			}
		}
	})
}

// TestOutside3EdgesRotateGivenTheSQLDB: Rotate given the *sql.DB
// (db.SQL()) is Rotate given the pool: its rotation and retirement commit
// together or not at all, so when recording the retirement fails (a
// trigger refuses it) the family is as it was, and the same token then
// rotates, once. On both engines (on SQLite, two statements in a
// transaction of Rotate's own).
func TestOutside3EdgesRotateGivenTheSQLDB(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		rotateWithTheRetirementRefused(t, db, db.SQL(), "rf_refuse3")
	})
}

// TestOutside3EdgesIssueAndRevokeRollBackWithTheCaller: given the
// caller's transaction, IssueRefresh, Issue, RevokeFamilies and
// RevokeCodes write in it, and a rollback undoes them: the family and
// the code issued in it are Unknown, and the family and code revoked in
// it still rotate and redeem. Each runs in a transaction of its own,
// first in it. On both engines.
func TestOutside3EdgesIssueAndRevokeRollBackWithTheCaller(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t, db, nil)
		kept, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
		code, _ := s.Issue(ctx, db, "login", "u", time.Hour)
		if kept == nil || code == nil {
			t.Fatal("issue failed")
		}
		rollback := errors.New("rollback")
		var (
			fam *onetime.Refresh
			c   *onetime.Code
		)
		for name, fn := range map[string]func(tx *sql.Tx) error{
			"IssueRefresh": func(tx *sql.Tx) (err error) {
				fam, err = s.IssueRefresh(ctx, tx, "u", time.Hour)
				return err
			},
			"Issue": func(tx *sql.Tx) (err error) {
				c, err = s.Issue(ctx, tx, "login", "u", time.Hour)
				return err
			},
			"RevokeFamilies": func(tx *sql.Tx) error {
				if n, err := s.RevokeFamilies(ctx, tx, "u"); err != nil || n != 1 {
					t.Errorf("RevokeFamilies in the transaction: %d, %v; want 1", n, err)
				}
				return nil
			},
			"RevokeCodes": func(tx *sql.Tx) error {
				if n, err := s.RevokeCodes(ctx, tx, "login", "u"); err != nil || n != 1 {
					t.Errorf("RevokeCodes in the transaction: %d, %v; want 1", n, err)
				}
				return nil
			},
		} {
			err := db.InTx(ctx, func(tx *sql.Tx) error {
				if err := fn(tx); err != nil {
					return err
				}
				return rollback
			})
			if !errors.Is(err, rollback) {
				t.Fatalf("%s: %v; want the rollback", name, err)
			}
		}
		if rot, err := s.Rotate(ctx, db, fam.Token); err != nil || rot.Outcome != onetime.Unknown {
			t.Errorf("the family issued in a rolled-back transaction: %v, %v; want unknown", rot.Outcome, err)
		}
		if r, err := s.Consume(ctx, db, "login", c.Token); err != nil || r.Outcome != onetime.Unknown {
			t.Errorf("the code issued in a rolled-back transaction: %v, %v; want unknown", r.Outcome, err)
		}
		if rot, err := s.Rotate(ctx, db, kept.Token); err != nil || rot.Outcome != onetime.Rotated {
			t.Errorf("the family revoked in a rolled-back transaction: %v, %v; want rotated", rot.Outcome, err)
		}
		if r, err := s.Consume(ctx, db, "login", code.Token); err != nil || r.Outcome != onetime.Consumed {
			t.Errorf("the code revoked in a rolled-back transaction: %v, %v; want consumed", r.Outcome, err)
		}
	})
}

// TestOutside3EdgesGraceEndsWithTheSuccessor: a retry within the grace
// window is Replayed only while the successor is live, so at the
// successor's exact expiry millisecond it is Reused, and the family is
// revoked. On both engines, on a manual clock.
func TestOutside3EdgesGraceEndsWithTheSuccessor(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, &onetime.Options{Grace: 10 * time.Second, Secret: secret}, func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock) {
		ctx := context.Background()
		first, _ := s.IssueRefresh(ctx, db, "u", time.Second)
		second, _ := s.IssueRefresh(ctx, db, "u", time.Second)
		if first == nil || second == nil {
			t.Fatal("issue failed")
		}
		rot1, _ := s.Rotate(ctx, db, first.Token) // successors expire at t0+1s
		rot2, _ := s.Rotate(ctx, db, second.Token)
		if rot1.Outcome != onetime.Rotated || rot2.Outcome != onetime.Rotated {
			t.Fatalf("rotations: %v, %v", rot1.Outcome, rot2.Outcome)
		}
		clock.Set(t0.Add(time.Second - time.Millisecond))
		if r, err := s.Rotate(ctx, db, first.Token); err != nil || r.Outcome != onetime.Replayed {
			t.Fatalf("retry 1 ms before the successor expires: %v, %v; want replayed", r.Outcome, err)
		}
		clock.Set(t0.Add(time.Second))
		if r, err := s.Rotate(ctx, db, second.Token); err != nil || r.Outcome != onetime.Reused || r.Next != nil {
			t.Fatalf("retry at the successor's exact expiry: %+v, %v; want reused", r, err)
		}
		if r, err := s.Rotate(ctx, db, rot2.Next.Token); err != nil || r.Outcome != onetime.Revoked {
			t.Fatalf("the successor after the reuse: %v, %v; want revoked", r.Outcome, err)
		}
	})
}

// TestOutside3EdgesAnotherSecretNeverReplaysAnotherSuccessor: a Store
// whose Secret differs from the one that rotated derives another
// successor, which the family never had: a retry there within the grace
// window is not Replayed with that token (which would be Unknown at its
// next use) but Reused, and the family is revoked. On both engines.
func TestOutside3EdgesAnotherSecretNeverReplaysAnotherSuccessor(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, &onetime.Options{Grace: time.Minute, Secret: secret}, func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock) {
		ctx := context.Background()
		other := newStore(t, db, &onetime.Options{Grace: time.Minute, Secret: []byte(strings.Repeat("z", onetime.MinSecretBytes))})
		r, _ := s.IssueRefresh(ctx, db, "u", time.Hour)
		if r == nil {
			t.Fatal("issue failed")
		}
		rot, err := s.Rotate(ctx, db, r.Token)
		if err != nil || rot.Outcome != onetime.Rotated {
			t.Fatalf("rotate: %v, %v; want rotated", rot.Outcome, err)
		}
		clock.Set(t0.Add(time.Second))
		retry, err := other.Rotate(ctx, db, r.Token)
		if err != nil || retry.Outcome != onetime.Reused || retry.Next != nil {
			t.Fatalf("retry on a Store with another Secret: %+v, %v; want reused", retry, err)
		}
		if got, err := s.Rotate(ctx, db, rot.Next.Token); err != nil || got.Outcome != onetime.Revoked {
			t.Fatalf("the successor after the reuse: %v, %v; want revoked", got.Outcome, err)
		}
	})
}

// TestOutside3EdgesRevokeCodesOfOnePurpose: RevokeCodes revokes the
// subject's live codes of the purpose named only: the same subject's code
// of another purpose, and another subject's code of that purpose, still
// redeem. On both engines.
func TestOutside3EdgesRevokeCodesOfOnePurpose(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		t.Parallel()
		ctx := context.Background()
		s := newStore(t, db, nil)
		reset, _ := s.Issue(ctx, db, "reset", "u", time.Hour)
		verify, _ := s.Issue(ctx, db, "verify", "u", time.Hour)
		otherSubject, _ := s.Issue(ctx, db, "reset", "v", time.Hour)
		if reset == nil || verify == nil || otherSubject == nil {
			t.Fatal("issue failed")
		}
		if n, err := s.RevokeCodes(ctx, db, "reset", "u"); err != nil || n != 1 {
			t.Fatalf("RevokeCodes(reset, u): %d, %v; want 1", n, err)
		}
		for _, tc := range []struct {
			name, purpose, token string
			want                 onetime.Outcome
		}{
			{"the revoked code", "reset", reset.Token, onetime.Revoked},
			{"the subject's code of another purpose", "verify", verify.Token, onetime.Consumed},
			{"another subject's code of the purpose", "reset", otherSubject.Token, onetime.Consumed},
		} {
			if r, err := s.Consume(ctx, db, tc.purpose, tc.token); err != nil || r.Outcome != tc.want {
				t.Errorf("%s: %v, %v; want %v", tc.name, r.Outcome, err, tc.want)
			}
		}
	})
}

// TestOutside3EdgesReapKeepsAnotherTenantsRetiredTokens: two tenants hold
// the same family (same name; the copy set by hand, as only the same
// first token makes it): in globex it has expired, in acme it lives and
// has rotated. Reap deletes globex's and nothing of acme's, whichever
// tenant it reaps first (acme, by name): acme's retired token is still
// recognised (Reused), not forgotten (Unknown). On both engines, as the
// owner (on PostgreSQL a superuser, so the SQL's tenant filter alone
// keeps them apart), on a manual clock.
func TestOutside3EdgesReapKeepsAnotherTenantsRetiredTokens(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, nil, func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock) {
		a, g := as(t, "acme"), as(t, "globex")
		fg, err := s.IssueRefresh(g, db, "u", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, db, `INSERT INTO racefree_refresh_families (tenant, family, subject, ttl_ms, head, head_expires_at, generation, created_at)
			SELECT 'acme', family, subject, 3600000, head, $1, generation, created_at FROM racefree_refresh_families WHERE tenant = 'globex'`,
			racefree.Millis(t0)+3_600_000)
		rot, err := s.Rotate(a, db, fg.Token)
		if err != nil || rot.Outcome != onetime.Rotated {
			t.Fatalf("acme rotates its copy: %v, %v; want rotated", rot.Outcome, err)
		}
		clock.Set(t0.Add(2 * time.Second))
		if c, f, err := s.Reap(context.Background(), 0, 0); err != nil || c != 0 || f != 1 {
			t.Fatalf("reap: %d codes, %d families, %v; want globex's one family", c, f, err)
		}
		if r, err := s.Rotate(g, db, fg.Token); err != nil || r.Outcome != onetime.Unknown {
			t.Errorf("globex's reaped family: %v, %v; want unknown", r.Outcome, err)
		}
		if r, err := s.Rotate(a, db, fg.Token); err != nil || r.Outcome != onetime.Reused {
			t.Errorf("acme's retired token after the reap: %v, %v; want reused", r.Outcome, err)
		}
		if r, err := s.Rotate(a, db, rot.Next.Token); err != nil || r.Outcome != onetime.Revoked {
			t.Errorf("acme's head after the reuse: %v, %v; want revoked", r.Outcome, err)
		}
	})
}
