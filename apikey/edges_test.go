package apikey_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// secretOf returns the secret part of a key's text.
func secretOf(token string) string { return token[strings.LastIndexByte(token, '_')+1:] }

// flipLast changes the last character of s to another hexadecimal digit.
func flipLast(s string) string {
	c := byte('0')
	if s[len(s)-1] == '0' {
		c = '1'
	}
	return s[:len(s)-1] + string(c)
}

// TestEdgesEachPartOfAKeyChangedAlone changes one part of a key's text
// alone (its tenant, its id, its secret) into a part of another real key
// and into one that matches nothing, after the key itself was verified
// and cached and with the cache off: each is ErrRefused, tried twice. A
// cache keyed by less than the whole text (the secret alone, the tenant
// and id alone) would answer one of them with the cached key, and one that
// remembered a key found by its tenant and id before its secret matched
// would answer the second try.
func TestEdgesEachPartOfAKeyChangedAlone(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		admin := newStore(t, db, -1)
		a, err := admin.Create(ctx, "acme", apikey.Read, "")
		if err != nil {
			t.Fatal(err)
		}
		a2, err := admin.Create(ctx, "acme", apikey.Read, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Create(ctx, "globex", apikey.Read, ""); err != nil {
			t.Fatal(err)
		}
		sec := secretOf(a.Token)
		changed := map[string]string{
			"tenant part: another tenant's": "rfk_globex_" + a.ID + "_" + sec,
			"tenant part: an unknown one":   "rfk_acmf_" + a.ID + "_" + sec,
			"id part: another key's":        "rfk_acme_" + a2.ID + "_" + sec,
			"id part: an unknown one":       "rfk_acme_" + flipLast(a.ID) + "_" + sec,
			"secret part: another key's":    "rfk_acme_" + a.ID + "_" + secretOf(a2.Token),
			"secret part: one digit":        flipLast(a.Token),
		}
		for _, ttl := range []time.Duration{apikey.MaxCacheTTL, -1} {
			s := newStore(t, db, ttl)
			if k, err := s.Verify(ctx, a.Token); err != nil || k.ID != a.ID {
				t.Fatalf("the key itself: %+v, %v", k, err)
			}
			// Each twice: a refusal is never remembered as the key.
			for try := 1; try <= 2; try++ {
				for name, text := range changed {
					if k, err := s.Verify(ctx, text); !errors.Is(err, apikey.ErrRefused) {
						t.Errorf("cache TTL %v: %s changed alone, try %d: %+v, %v; want ErrRefused", ttl, name, try, k, err)
					}
				}
			}
			if k, err := s.Verify(ctx, a.Token); err != nil || k.ID != a.ID || k.Tenant != "acme" {
				t.Fatalf("the key itself again: %+v, %v", k, err)
			}
		}
	})
}

// TestEdgesALookupThatFailsIsNotARefusal: with the cache off, a Verify
// whose lookup cannot run (the caller cancelled) returns the context's
// error, never ErrRefused (a 401 for what is an outage or a caller gone)
// nor ErrMalformed; the same key verifies once the caller is back.
func TestEdgesALookupThatFailsIsNotARefusal(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, -1)
		c, err := s.Create(ctx, "acme", apikey.Read, "")
		if err != nil {
			t.Fatal(err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		for _, text := range []string{c.Token, "rfk_ghost_" + c.ID + "_" + secretOf(c.Token)} {
			k, err := s.Verify(cancelled, text)
			if err == nil || errors.Is(err, apikey.ErrRefused) || errors.Is(err, apikey.ErrMalformed) || !errors.Is(err, context.Canceled) {
				t.Errorf("%q under a cancelled context: %+v, %v; want context.Canceled, not a refusal", text, k, err)
			}
		}
		if _, err := s.Verify(ctx, c.Token); err != nil {
			t.Fatalf("after the cancelled verify: %v", err)
		}
	})
}

// TestEdgesKeyBounds tries a key's documented limits at the limit and one
// past it: a tenant of exactly tenant.MaxIDBytes makes a key that
// verifies and lists, one byte more is an InputError for Create and
// ErrMalformed for Verify; a name of exactly MaxNameBytes is kept whole,
// one byte more (or a two-byte character that crosses the limit) is an
// InputError; nothing refused is written.
func TestEdgesKeyBounds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, -1)
		long := strings.Repeat("t", tenant.MaxIDBytes-1) + "9"
		name := strings.Repeat("n", apikey.MaxNameBytes)
		c, err := s.Create(ctx, long, apikey.Read|apikey.Admin, name)
		if err != nil {
			t.Fatalf("a tenant of %d bytes and a name of %d: %v", len(long), len(name), err)
		}
		if k, err := s.Verify(ctx, c.Token); err != nil || k.Tenant != long || k.ID != c.ID || k.Name != name {
			t.Fatalf("the key of a %d-byte tenant: %+v, %v", len(long), k, err)
		}
		keys, err := s.List(ctx, long)
		if err != nil || len(keys) != 1 || keys[0].Name != name {
			t.Fatalf("list: %+v, %v; want the name of %d bytes whole", keys, err, len(name))
		}
		past := long + "x"
		if _, err := s.Create(ctx, past, apikey.Read, ""); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("a tenant of %d bytes: %v, want an InputError", len(past), err)
		}
		if _, err := s.Verify(ctx, "rfk_"+past+"_"+c.ID+"_"+secretOf(c.Token)); !errors.Is(err, apikey.ErrMalformed) {
			t.Errorf("a key of a %d-byte tenant: %v, want ErrMalformed", len(past), err)
		}
		for _, bad := range []string{name + "n", name[:apikey.MaxNameBytes-1] + "é"} {
			if _, err := s.Create(ctx, "acme", apikey.Read, bad); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("a name of %d bytes: %v, want an InputError", len(bad), err)
			}
		}
		if n := count(t, db, `SELECT count(*) FROM racefree_keys`); n != 1 {
			t.Fatalf("%d keys, want the one at the limits", n)
		}
		if n := count(t, db, `SELECT count(*) FROM racefree_tenants WHERE id = 'acme' OR length(id) > 64`); n != 0 {
			t.Fatalf("a refused key registered %d tenants", n)
		}
	})
}

// TestEdgesOneKeyIDInTwoTenants gives a key of each of two tenants the
// same id (they differ in the tenant alone): each verifies with its own
// secret and as its own tenant only, lists in its tenant only, and
// revoking one leaves the other live.
func TestEdgesOneKeyIDInTwoTenants(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, -1)
		a, err := s.Create(ctx, "acme", apikey.Read, "a")
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Create(ctx, "globex", apikey.Write, "b")
		if err != nil {
			t.Fatal(err)
		}
		q := `UPDATE racefree_keys SET id = $1 WHERE tenant = 'globex'`
		if db.Engine() == racefree.SQLite {
			q = `UPDATE racefree_keys SET id = ?1 WHERE tenant = 'globex'`
		}
		if _, err := db.ExecContext(ctx, q, a.ID); err != nil {
			t.Fatal(err)
		}
		bToken := "rfk_globex_" + a.ID + "_" + secretOf(b.Token)
		if k, err := s.Verify(ctx, bToken); err != nil || k.Tenant != "globex" || k.Scopes != apikey.Write || k.Name != "b" {
			t.Fatalf("globex's key with acme's id: %+v, %v", k, err)
		}
		if k, err := s.Verify(ctx, a.Token); err != nil || k.Tenant != "acme" || k.Scopes != apikey.Read || k.Name != "a" {
			t.Fatalf("acme's key: %+v, %v", k, err)
		}
		for _, text := range []string{"rfk_globex_" + a.ID + "_" + secretOf(a.Token), "rfk_acme_" + a.ID + "_" + secretOf(b.Token)} {
			if _, err := s.Verify(ctx, text); !errors.Is(err, apikey.ErrRefused) {
				t.Errorf("%q: %v; want ErrRefused (the secret of the other tenant's key)", text, err)
			}
		}
		for _, id := range []string{"acme", "globex"} {
			keys, err := s.List(ctx, id)
			if err != nil || len(keys) != 1 || keys[0].Tenant != id || keys[0].ID != a.ID {
				t.Fatalf("list %s: %+v, %v", id, keys, err)
			}
		}
		if _, err := s.Revoke(ctx, "acme", a.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Verify(ctx, a.Token); !errors.Is(err, apikey.ErrRefused) {
			t.Fatalf("acme's revoked key: %v", err)
		}
		if k, err := s.Verify(ctx, bToken); err != nil || k.Revoked() {
			t.Fatalf("revoking acme's key revoked globex's of the same id: %+v, %v", k, err)
		}
	})
}

// TestEdgesListIsOldestFirstAndRevokeKeepsItsTime: on the engine's
// (injected) clock, List returns a tenant's keys by creation time, those
// of one millisecond by id, whatever order their random ids have; and a
// second Revoke, a millisecond or a minute later, keeps the first's time
// to the millisecond, in what it returns and in what List shows.
func TestEdgesListIsOldestFirstAndRevokeKeepsItsTime(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := racefree.NewManualClock(t0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		clock.Set(t0)
		s := newStore(t, db, -1)
		var made []apikey.Created
		for i := range 8 {
			if i > 0 && i%2 == 0 { // two keys a millisecond
				clock.Advance(time.Millisecond)
			}
			c, err := s.Create(ctx, "acme", apikey.Read, "")
			if err != nil {
				t.Fatal(err)
			}
			made = append(made, c)
		}
		want := slices.Clone(made)
		slices.SortStableFunc(want, func(a, b apikey.Created) int {
			return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
		})
		keys, err := s.List(ctx, "acme")
		if err != nil || len(keys) != len(want) {
			t.Fatalf("list: %d keys, %v; want %d", len(keys), err, len(want))
		}
		for i := range want {
			if keys[i].ID != want[i].ID || !keys[i].CreatedAt.Equal(want[i].CreatedAt) {
				t.Fatalf("list[%d] = %s at %v; want %s at %v (oldest first, then by id)", i, keys[i].ID, keys[i].CreatedAt, want[i].ID, want[i].CreatedAt)
			}
		}

		clock.Advance(time.Second)
		first, err := s.Revoke(ctx, "acme", made[0].ID)
		if err != nil || !first.RevokedAt.Equal(clock.Now()) {
			t.Fatalf("revoke: %+v, %v; want revoked at %v", first, err, clock.Now())
		}
		for _, later := range []time.Duration{time.Millisecond, time.Minute} {
			clock.Advance(later)
			again, err := s.Revoke(ctx, "acme", made[0].ID)
			if err != nil || !again.RevokedAt.Equal(first.RevokedAt) {
				t.Fatalf("revoke again %v later: %+v, %v; want the first revocation's time %v", later, again, err, first.RevokedAt)
			}
		}
		keys, err = s.List(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if k.ID == made[0].ID && !k.RevokedAt.Equal(first.RevokedAt) {
				t.Fatalf("listed revoked at %v; want %v", k.RevokedAt, first.RevokedAt)
			}
		}
	})
}
