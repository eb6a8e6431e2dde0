package apikey_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestOutside2EdgesScopeBitsPastTheNamedOnes: Create refuses, as an
// InputError, a scope set holding a bit no scope names, the one just past
// AllScopes (Scope(8)) first among them, alone and beside a named scope;
// nothing is written.
func TestOutside2EdgesScopeBitsPastTheNamedOnes(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, -1)
		for _, sc := range []apikey.Scope{apikey.AllScopes + 1, apikey.Read | (apikey.AllScopes + 1), 1 << 4, 1 << 7, 255} {
			if c, err := s.Create(ctx, "acme", sc, ""); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("scopes %08b: %+v, %v; want an InputError", uint8(sc), c.Key, err)
			}
		}
		if n := count(t, db, `SELECT count(*) FROM racefree_keys`); n != 0 {
			t.Fatalf("%d keys written for refused scopes, want 0", n)
		}
		// AllScopes itself, the largest set that names only scopes, is taken.
		if c, err := s.Create(ctx, "acme", apikey.AllScopes, ""); err != nil || c.Scopes != apikey.AllScopes {
			t.Fatalf("every scope: %+v, %v", c.Key, err)
		}
	})
}

// TestOutside2EdgesEveryAnswerCarriesTheKeyWhole: on the DB's (manual)
// clock, the key that Create returns, that Verify returns read from the
// database and again from the cache, and that Revoke returns each carry
// its tenant, id, name, scopes and creation time, the clock's time at
// Create to the millisecond; Revoke's carries the clock's time at Revoke.
func TestOutside2EdgesEveryAnswerCarriesTheKeyWhole(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)
	for _, engine := range testdb.Engines {
		t.Run(engine, func(t *testing.T) {
			clock := racefree.NewManualClock(t0)
			db := testdb.Open(t, testdb.NewDSN(t, engine), &racefree.Config{Clock: clock})
			ctx := context.Background()
			s := newStore(t, db, apikey.MaxCacheTTL)
			c, err := s.Create(ctx, "acme", apikey.Read|apikey.Admin, "deploy bot")
			if err != nil {
				t.Fatal(err)
			}
			whole := func(what string, k apikey.Key) {
				t.Helper()
				if k.Tenant != "acme" || k.ID != c.ID || k.Name != "deploy bot" || k.Scopes != apikey.Read|apikey.Admin || !k.CreatedAt.Equal(t0) {
					t.Errorf("%s: %+v; want acme's key %s \"deploy bot\" of read,admin created at %v (the DB's clock)", what, k, c.ID, t0)
				}
			}
			whole("Create", c.Key)
			for _, what := range []string{"Verify (read)", "Verify (cached)"} {
				k, err := s.Verify(ctx, c.Token)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				whole(what, k)
			}
			keys, err := s.List(ctx, "acme")
			if err != nil || len(keys) != 1 {
				t.Fatalf("list: %+v, %v", keys, err)
			}
			whole("List", keys[0])
			clock.Advance(time.Minute)
			r, err := s.Revoke(ctx, "acme", c.ID)
			if err != nil {
				t.Fatal(err)
			}
			whole("Revoke", r)
			if !r.RevokedAt.Equal(t0.Add(time.Minute)) {
				t.Errorf("Revoke: revoked at %v, want %v (the DB's clock)", r.RevokedAt, t0.Add(time.Minute))
			}
		})
	}
}

// TestOutside2EdgesListKeepsEachKeysOwnRevocation: List shows each key's
// own revocation: of four keys, oldest first, the first and third
// revoked, the second and fourth (each listed right after a revoked key)
// are live.
func TestOutside2EdgesListKeepsEachKeysOwnRevocation(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)
	for _, engine := range testdb.Engines {
		t.Run(engine, func(t *testing.T) {
			clock := racefree.NewManualClock(t0)
			db := testdb.Open(t, testdb.NewDSN(t, engine), &racefree.Config{Clock: clock})
			ctx := context.Background()
			s := newStore(t, db, -1)
			var ids []string
			for range 4 {
				c, err := s.Create(ctx, "acme", apikey.Read, "")
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, c.ID)
				clock.Advance(time.Millisecond)
			}
			revokedAt := map[string]time.Time{}
			for _, i := range []int{0, 2} {
				clock.Advance(time.Second)
				r, err := s.Revoke(ctx, "acme", ids[i])
				if err != nil {
					t.Fatal(err)
				}
				revokedAt[ids[i]] = r.RevokedAt
			}
			keys, err := s.List(ctx, "acme")
			if err != nil || len(keys) != 4 {
				t.Fatalf("list: %+v, %v", keys, err)
			}
			for i, k := range keys {
				if k.ID != ids[i] {
					t.Fatalf("list[%d] = %s, want %s (oldest first)", i, k.ID, ids[i])
				}
				if want := revokedAt[k.ID]; !k.RevokedAt.Equal(want) || k.Revoked() != !want.IsZero() {
					t.Errorf("list[%d] (%s): revoked at %v, want %v", i, k.ID, k.RevokedAt, want)
				}
			}
		})
	}
}

// TestOutside2EdgesRevokeIDAtItsLength: a key id is exactly 16 lowercase
// hexadecimal digits: 15, 17 and none are an InputError from CheckID and
// from Revoke (which then touches no key), while an unknown id of 16 is
// ErrNotFound.
func TestOutside2EdgesRevokeIDAtItsLength(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, -1)
		c, err := s.Create(ctx, "acme", apikey.Read, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{c.ID[:15], c.ID + "0", "0" + c.ID, ""} {
			if err := apikey.CheckID(id); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("CheckID(%q): %v, want an InputError", id, err)
			}
			if _, err := s.Revoke(ctx, "acme", id); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("Revoke(%q): %v, want an InputError", id, err)
			}
		}
		if _, err := s.Verify(ctx, c.Token); err != nil {
			t.Fatalf("the key after refused revocations: %v", err)
		}
		if err := apikey.CheckID(c.ID); err != nil {
			t.Fatalf("CheckID of a real id: %v", err)
		}
		if _, err := s.Revoke(ctx, "acme", "0000000000000000"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("an unknown id of 16 digits: %v, want ErrNotFound", err)
		}
	})
}

// call serves method path on h (a claim's JSON body, for a POST) with
// the credential key and returns the status and the WWW-Authenticate
// header.
func call(h http.Handler, method, path, key string) (int, string) {
	req := httptest.NewRequest(method, path, strings.NewReader(`{"holder":"w","ttl_ms":60000}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Header().Get("WWW-Authenticate")
}

// TestOutside2EdgesTheServerChallengeNamesTheScopeItNeeds: a key without
// a route's scope is 403 with a challenge naming the scope the route
// needs (write for a POST, read for a GET, admin for the checkpoint),
// never the scopes the key has.
func TestOutside2EdgesTheServerChallengeNamesTheScopeItNeeds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, -1)
		key := func(sc apikey.Scope) string {
			c, err := s.Create(ctx, "acme", sc, "")
			if err != nil {
				t.Fatal(err)
			}
			return c.Token
		}
		h := server.New(db, server.Options{RequireKey: true, Keys: s}).Handler()
		for _, c := range []struct {
			key          apikey.Scope
			method, path string
			need         string
		}{
			{apikey.Read, "POST", "/v1/claims/k", "write"},
			{apikey.Read | apikey.Admin, "POST", "/v1/claims/k", "write"},
			{apikey.Write, "GET", "/v1/claims/k", "read"},
			{apikey.Write | apikey.Admin, "GET", "/v1/claims/k", "read"},
			{apikey.Read | apikey.Write, "POST", "/v1/audit/checkpoints", "admin"},
		} {
			code, challenge := call(h, c.method, c.path, key(c.key))
			if code != 403 || !strings.Contains(challenge, `error="insufficient_scope"`) || !strings.Contains(challenge, `scope="`+c.need+`"`) {
				t.Errorf("a %s key, %s %s: %d %q; want 403 with a challenge naming scope=%q", c.key, c.method, c.path, code, challenge, c.need)
			}
		}
	})
}

// TestOutside2EdgesTheServerVerifiesWithTheStoreItIsGiven: a server given
// a store (Options.Keys) with the cache off verifies with that store: a
// key it has just served is refused at the next request once revoked,
// with no cache in between (no waiting: the next request is refused).
func TestOutside2EdgesTheServerVerifiesWithTheStoreItIsGiven(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, -1)
		c, err := s.Create(ctx, "acme", apikey.AllScopes, "")
		if err != nil {
			t.Fatal(err)
		}
		h := server.New(db, server.Options{RequireKey: true, Keys: s}).Handler()
		if code, _ := call(h, "GET", "/v1/claims/k", c.Token); code != 404 {
			t.Fatalf("the live key: %d, want 404 (admitted, no such claim)", code)
		}
		if _, err := s.Revoke(ctx, "acme", c.ID); err != nil {
			t.Fatal(err)
		}
		if code, challenge := call(h, "GET", "/v1/claims/k", c.Token); code != 401 || challenge == "" {
			t.Fatalf("the revoked key, next request: %d %q; want 401 (the store given has no cache)", code, challenge)
		}
	})
}
