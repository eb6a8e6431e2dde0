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

// TestOptionBounds tries each bound of Options at the bound and one past
// it, one option at a time: Grace 0 (with and without a Secret) and
// MaxGrace are accepted, MaxGrace + 1ms and -1ms are not; a Secret of
// MinSecretBytes is accepted, one byte less is not.
func TestOptionBounds(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
	long := []byte(strings.Repeat("s", onetime.MinSecretBytes))
	for _, tc := range []struct {
		name string
		o    onetime.Options
		ok   bool
	}{
		{"Grace 0, no Secret", onetime.Options{}, true},
		{"Grace 0, a Secret", onetime.Options{Secret: long}, true},
		{"Grace MaxGrace", onetime.Options{Grace: onetime.MaxGrace, Secret: long}, true},
		{"Grace MaxGrace+1ms", onetime.Options{Grace: onetime.MaxGrace + time.Millisecond, Secret: long}, false},
		{"Grace -1ms", onetime.Options{Grace: -time.Millisecond, Secret: long}, false},
		{"Grace 1ms, no Secret", onetime.Options{Grace: time.Millisecond}, false},
		{"Secret of MinSecretBytes", onetime.Options{Grace: time.Millisecond, Secret: long}, true},
		{"Secret of MinSecretBytes-1", onetime.Options{Grace: time.Millisecond, Secret: long[1:]}, false},
		{"Secret of MinSecretBytes-1, Grace 0", onetime.Options{Secret: long[1:]}, false},
	} {
		_, err := onetime.New(db, &tc.o)
		if tc.ok && err != nil {
			t.Errorf("%s: %v; want accepted", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("%s: %v; want an InputError", tc.name, err)
		}
	}
}

// TestTTLBounds issues codes and refresh tokens with a ttl at MinTTL and
// MaxTTL (accepted, expiring exactly then) and one millisecond past each
// (an InputError, nothing stored), on both engines; and Reap's grace at 0
// (accepted) and -1ms (an InputError).
func TestTTLBounds(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, nil, func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock) {
		ctx := context.Background()
		for _, ttl := range []time.Duration{onetime.MinTTL, onetime.MaxTTL} {
			c, err := s.Issue(ctx, db, "login", "u", ttl)
			if err != nil || !c.ExpiresAt.Equal(t0.Add(ttl)) {
				t.Fatalf("Issue(ttl %s) = expires %v, %v; want %v", ttl, c.ExpiresAt, err, t0.Add(ttl))
			}
			r, err := s.IssueRefresh(ctx, db, "u", ttl)
			if err != nil || !r.ExpiresAt.Equal(t0.Add(ttl)) {
				t.Fatalf("IssueRefresh(ttl %s) = expires %v, %v; want %v", ttl, r.ExpiresAt, err, t0.Add(ttl))
			}
		}
		for _, ttl := range []time.Duration{onetime.MinTTL - time.Millisecond, onetime.MaxTTL + time.Millisecond} {
			if _, err := s.Issue(ctx, db, "login", "v", ttl); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Issue(ttl %s): %v; want an InputError", ttl, err)
			}
			if _, err := s.IssueRefresh(ctx, db, "v", ttl); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("IssueRefresh(ttl %s): %v; want an InputError", ttl, err)
			}
		}
		for table, want := range map[string]int{"racefree_onetime_codes": 2, "racefree_refresh_families": 2} {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != want {
				t.Errorf("%s has %d rows; want %d (none from the refused ttls)", table, n, want)
			}
		}
		if _, _, err := s.Reap(ctx, -time.Millisecond, 0); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("Reap(grace -1ms): %v; want an InputError", err)
		}
		if _, _, err := s.Reap(ctx, 0, 0); err != nil {
			t.Errorf("Reap(grace 0): %v; want accepted", err)
		}
	})
}

// TestOutcomeNames: every outcome has its API name, and a value outside
// them, on either side, prints as a number instead of panicking.
func TestOutcomeNames(t *testing.T) {
	t.Parallel()
	for o, want := range map[onetime.Outcome]string{
		onetime.Consumed: "consumed", onetime.Rotated: "rotated", onetime.Replayed: "replayed",
		onetime.AlreadyUsed: "already_used", onetime.Reused: "reused", onetime.Revoked: "revoked",
		onetime.Expired: "expired", onetime.Unknown: "unknown",
		0: "Outcome(0)", onetime.Unknown + 1: "Outcome(9)", -1: "Outcome(-1)",
	} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q; want %q", int(o), got, want)
		}
	}
}

// TestEdgesARotationWhoseRetirementFailsChangesNothing: when recording
// the presented token as retired fails (a trigger refuses it), Rotate
// returns the error and the family is as it was, on both engines: given
// the pool, the rotation and the retirement commit together or not at
// all (on SQLite they are two statements, run in a transaction of
// Rotate's own). The same token then rotates, once, to the first
// successor.
func TestEdgesARotationWhoseRetirementFailsChangesNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		rotateWithTheRetirementRefused(t, db, db, "rf_refuse")
	})
}

// rotateWithTheRetirementRefused issues a family through exec, has a
// trigger (named trigger) refuse the retirement of its token, and holds
// Rotate through exec to the promise: the trigger's error and nothing
// changed; once the trigger is gone, the same token rotates to the first
// successor, and again it is Reused (the retirement was recorded).
func rotateWithTheRetirementRefused(t *testing.T, db *racefree.DB, exec racefree.Executor, trigger string) {
	t.Helper()
	ctx := context.Background()
	s := newStore(t, db, nil)
	r, err := s.IssueRefresh(ctx, exec, "u", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	refuse, allow := []string{
		`CREATE TRIGGER ` + trigger + ` BEFORE INSERT ON racefree_refresh_retired BEGIN SELECT RAISE(ABORT, 'retirement refused by the test'); END`,
	}, `DROP TRIGGER `+trigger
	if db.Engine() == racefree.Postgres {
		refuse = []string{
			`CREATE FUNCTION ` + trigger + `() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION 'retirement refused by the test'; END $f$`,
			`CREATE TRIGGER ` + trigger + ` BEFORE INSERT ON racefree_refresh_retired FOR EACH ROW EXECUTE FUNCTION ` + trigger + `()`,
		}
		allow = `DROP TRIGGER ` + trigger + ` ON racefree_refresh_retired`
	}
	testdb.ExecAll(t, db, refuse...)
	if rot, err := s.Rotate(ctx, exec, r.Token); err == nil || !strings.Contains(err.Error(), "retirement refused by the test") {
		t.Fatalf("Rotate on %T with the retirement refused = %+v, %v; want the trigger's error", exec, rot, err)
	}
	testdb.ExecAll(t, db, allow)
	rot, err := s.Rotate(ctx, exec, r.Token)
	if err != nil || rot.Outcome != onetime.Rotated || rot.Next.Generation != r.Generation+1 {
		t.Fatalf("Rotate once the retirement is allowed = %+v, %v; want Rotated to generation %d", rot, err, r.Generation+1)
	}
	if again, err := s.Rotate(ctx, exec, r.Token); err != nil || again.Outcome != onetime.Reused {
		t.Fatalf("Rotate of the retired token = %+v, %v; want Reused (the retirement was recorded)", again, err)
	}
}

// TestEdgesRevokeCodesAtTheExactMillisecond revokes the codes of one
// purpose and subject 1 ms before one expires and at the millisecond
// another expires: the live one is revoked (counted, and refused as
// Revoked), the expired one is left as it is (not counted, still refused
// as Expired), as RevokeCodes promises of expired codes.
func TestEdgesRevokeCodesAtTheExactMillisecond(t *testing.T) {
	t.Parallel()
	eachOnAClock(t, nil, func(t *testing.T, db *racefree.DB, s *onetime.Store, clock *racefree.ManualClock) {
		ctx := context.Background()
		live, err := s.Issue(ctx, db, "reset", "live", time.Second+time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		expired, err := s.Issue(ctx, db, "reset", "expired", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		clock.Set(t0.Add(time.Second)) // live has 1 ms left; expired expires now
		if n, err := s.RevokeCodes(ctx, db, "reset", "live"); err != nil || n != 1 {
			t.Fatalf("revoke 1 ms before expiry: %d, %v; want 1", n, err)
		}
		if n, err := s.RevokeCodes(ctx, db, "reset", "expired"); err != nil || n != 0 {
			t.Fatalf("revoke at the exact millisecond of expiry: %d, %v; want 0, the code is expired", n, err)
		}
		if r, err := s.Consume(ctx, db, "reset", live.Token); err != nil || r.Outcome != onetime.Revoked {
			t.Fatalf("the code revoked 1 ms before expiry: %v, %v; want revoked", r.Outcome, err)
		}
		if r, err := s.Consume(ctx, db, "reset", expired.Token); err != nil || r.Outcome != onetime.Expired {
			t.Fatalf("the code expired when revoked: %v, %v; want expired, left as it was", r.Outcome, err)
		}
	})
}
