package apikey_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/apikey"
	"github.com/racefree/racefree/internal/testing/testdb"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T, db *racefree.DB, ttl time.Duration) *apikey.Store {
	t.Helper()
	s, err := apikey.New(db, &apikey.Options{CacheTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func count(t *testing.T, db *racefree.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCreateVerifyListRevoke(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, -1)
		c, err := s.Create(ctx, "acme", apikey.Read|apikey.Write, "ci")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(c.Token, "rfk_acme_"+c.ID+"_") || len(c.Token) != len("rfk_acme_")+16+1+64 {
			t.Fatalf("token %q: want rfk_acme_<id>_<64 hex digits>", c.Token)
		}
		k, err := s.Verify(ctx, c.Token)
		if err != nil {
			t.Fatal(err)
		}
		if k.Tenant != "acme" || k.ID != c.ID || k.Scopes != apikey.Read|apikey.Write || k.Name != "ci" || k.Revoked() || !k.CreatedAt.Equal(c.CreatedAt) {
			t.Fatalf("verified %+v", k)
		}
		// A tenant whose id contains '_' parses too.
		u, err := s.Create(ctx, "team_b.eu:1", apikey.Admin, "")
		if err != nil {
			t.Fatal(err)
		}
		if k, err := s.Verify(ctx, u.Token); err != nil || k.Tenant != "team_b.eu:1" || k.Scopes != apikey.Admin {
			t.Fatalf("verify %q: %+v, %v", u.Token, k, err)
		}

		keys, err := s.List(ctx, "acme")
		if err != nil || len(keys) != 1 || keys[0].ID != c.ID || keys[0].Scopes.String() != "read,write" || keys[0].CreatedAt.IsZero() {
			t.Fatalf("list: %+v, %v", keys, err)
		}
		r, err := s.Revoke(ctx, "acme", c.ID)
		if err != nil || !r.Revoked() {
			t.Fatalf("revoke: %+v, %v", r, err)
		}
		if _, err := s.Verify(ctx, c.Token); !errors.Is(err, apikey.ErrRefused) {
			t.Fatalf("revoked key: %v, want ErrRefused", err)
		}
		again, err := s.Revoke(ctx, "acme", c.ID)
		if err != nil || !again.RevokedAt.Equal(r.RevokedAt) {
			t.Fatalf("second revoke: %+v, %v; want the first revocation's time %v", again, err, r.RevokedAt)
		}
		keys, _ = s.List(ctx, "acme")
		if len(keys) != 1 || !keys[0].RevokedAt.Equal(r.RevokedAt) {
			t.Fatalf("list after revoke: %+v", keys)
		}
		if _, err := s.Revoke(ctx, "acme", "0123456789abcdef"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("unknown id: %v, want ErrNotFound", err)
		}
		// Another tenant cannot revoke acme's key by its id.
		if _, err := s.Revoke(ctx, "team_b.eu:1", c.ID); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("revoke of another tenant's key: %v, want ErrNotFound", err)
		}
	})
}

func TestOnlyTheHashOfTheSecretIsStored(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		c, err := newStore(t, db, 0).Create(ctx, "acme", apikey.Read, "n")
		if err != nil {
			t.Fatal(err)
		}
		secret := c.Token[strings.LastIndexByte(c.Token, '_')+1:]
		var (
			hash                       []byte
			tenantID, id, scopes, name string
			created                    int64
		)
		err = db.QueryRowContext(ctx, `SELECT tenant, id, hash, scopes, name, created_at FROM racefree_keys`).Scan(&tenantID, &id, &hash, &scopes, &name, &created)
		if err != nil {
			t.Fatal(err)
		}
		want := sha256.Sum256([]byte(secret))
		if string(hash) != string(want[:]) {
			t.Fatalf("stored hash %x, want the SHA-256 of the secret %x", hash, want)
		}
		for _, col := range []string{tenantID, id, scopes, name, string(hash)} {
			if strings.Contains(col, secret) || strings.Contains(col, c.Token) {
				t.Fatalf("a column holds the secret: %q", col)
			}
		}
	})
}

func TestWrongSecretsAndOtherTenantsAreRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, 0)
		a, err := s.Create(ctx, "acme", apikey.Read, "")
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Create(ctx, "globex", apikey.Read, "")
		if err != nil {
			t.Fatal(err)
		}
		flip := func(s string, i int) string {
			c := byte('0')
			if s[i] == '0' {
				c = '1'
			}
			return s[:i] + string(c) + s[i+1:]
		}
		aSecret := a.Token[strings.LastIndexByte(a.Token, '_')+1:]
		for name, text := range map[string]string{
			"last digit of the secret":  flip(a.Token, len(a.Token)-1),
			"first digit of the secret": flip(a.Token, len(a.Token)-64),
			"another key's secret":      strings.TrimSuffix(a.Token, aSecret) + b.Token[strings.LastIndexByte(b.Token, '_')+1:],
			"acme's key as globex's":    "rfk_globex_" + a.ID + "_" + aSecret,
			"unknown id":                "rfk_acme_0123456789abcdef_" + aSecret,
		} {
			if k, err := s.Verify(ctx, text); !errors.Is(err, apikey.ErrRefused) {
				t.Errorf("%s: %+v, %v; want ErrRefused", name, k, err)
			}
		}
		if _, err := s.Verify(ctx, a.Token); err != nil {
			t.Fatalf("the key itself: %v", err)
		}
	})
}

// TestMalformedKeysTouchNothing: text that is not a key is refused
// without a statement (the store's database is closed), and a
// well-formed key of a tenant racefree never saw registers nothing.
func TestMalformedKeysTouchNothing(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		db := testdb.Open(t, d, nil)
		s := newStore(t, db, 0)
		c, err := s.Create(ctx, "acme", apikey.Read, "")
		if err != nil {
			t.Fatal(err)
		}
		secret := c.Token[strings.LastIndexByte(c.Token, '_')+1:]
		malformed := []string{
			"", "rfk_", "Bearer " + c.Token, " " + c.Token, c.Token + " ", c.Token + "0", c.Token[:len(c.Token)-1],
			strings.ToUpper(c.Token), "rfk__" + c.ID + "_" + secret, "rfk_-acme_" + c.ID + "_" + secret,
			"rfk_ac me_" + c.ID + "_" + secret, "rfk_acme" + c.ID + "_" + secret, "rfk_acme_" + c.ID + secret,
			"rfk_acme_" + strings.ToUpper(c.ID) + "_" + secret,
			// Each separator replaced by another byte, the length kept.
			"rfk_acme_" + c.ID + "-" + secret, "rfk_acme-" + c.ID + "_" + secret, "rfk_acme_" + c.ID + "0" + secret, "rfk_acme_" + c.ID + "_" + strings.Repeat("g", 64),
			"rfk_" + strings.Repeat("a", 65) + "_" + c.ID + "_" + secret, "rfk_acme\x00_" + c.ID + "_" + secret,
			"xyz_acme_" + c.ID + "_" + secret, strings.Repeat("x", 10000),
		}
		closed := testdb.Open(t, d, nil)
		sc := newStore(t, closed, 0)
		closed.Close()
		for _, text := range malformed {
			if _, err := sc.Verify(ctx, text); !errors.Is(err, apikey.ErrMalformed) {
				t.Errorf("%q: %v, want ErrMalformed before any statement", text, err)
			}
		}
		before := count(t, db, `SELECT count(*) FROM racefree_tenants`)
		if _, err := s.Verify(ctx, "rfk_ghost_"+c.ID+"_"+secret); !errors.Is(err, apikey.ErrRefused) {
			t.Fatalf("unknown tenant: %v, want ErrRefused", err)
		}
		if after := count(t, db, `SELECT count(*) FROM racefree_tenants`); after != before {
			t.Fatalf("a key of an unknown tenant registered it: %d tenants, had %d", after, before)
		}
	})
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, 0)
		for name, call := range map[string]func() error{
			"empty tenant":    func() error { _, err := s.Create(ctx, "", apikey.Read, ""); return err },
			"bad tenant":      func() error { _, err := s.Create(ctx, "a b", apikey.Read, ""); return err },
			"no scope":        func() error { _, err := s.Create(ctx, "acme", 0, ""); return err },
			"unknown scope":   func() error { _, err := s.Create(ctx, "acme", 1<<5, ""); return err },
			"NUL in the name": func() error { _, err := s.Create(ctx, "acme", apikey.Read, "a\x00"); return err },
			"long name":       func() error { _, err := s.Create(ctx, "acme", apikey.Read, strings.Repeat("n", 201)); return err },
			"bad revoke id":   func() error { _, err := s.Revoke(ctx, "acme", "nope"); return err },
			"bad revoke tenant": func() error {
				_, err := s.Revoke(ctx, "", "0123456789abcdef")
				return err
			},
			"bad list tenant": func() error { _, err := s.List(ctx, "a b"); return err },
		} {
			if err := call(); !errors.Is(err, racefree.ErrInvalidInput) {
				t.Errorf("%s: %v, want an InputError", name, err)
			}
		}
		if n := count(t, db, `SELECT count(*) FROM racefree_keys`); n != 0 {
			t.Fatalf("%d keys after bad input, want 0", n)
		}
		if n := count(t, db, `SELECT count(*) FROM racefree_tenants WHERE id <> 'default'`); n != 0 {
			t.Fatalf("%d tenants registered by bad input, want 0", n)
		}
		if _, err := apikey.New(db, &apikey.Options{CacheTTL: apikey.MaxCacheTTL + time.Millisecond}); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("cache TTL above a second: %v, want an InputError", err)
		}
	})
}

func TestParseScopes(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]apikey.Scope{
		"read": apikey.Read, "read,write": apikey.Read | apikey.Write, " admin , read ": apikey.Read | apikey.Admin,
		"read,write,admin": apikey.AllScopes,
	} {
		if got, err := apikey.ParseScopes(text); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", text, got, err, want)
		}
	}
	for _, text := range []string{"", "reed", "read,", "READ", "read;write"} {
		if _, err := apikey.ParseScopes(text); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("%q: %v, want an InputError", text, err)
		}
	}
	if !apikey.AllScopes.Has(apikey.Admin) || apikey.Admin.Has(apikey.Write) || (apikey.Read | apikey.Write).Has(apikey.Admin) {
		t.Error("Has: scopes are independent")
	}
	// A set of scopes is granted whole or not at all.
	if !(apikey.Read | apikey.Write).Has(apikey.Read|apikey.Write) || apikey.Read.Has(apikey.Read|apikey.Write) ||
		(apikey.Read | apikey.Admin).Has(apikey.AllScopes) || !apikey.AllScopes.Has(apikey.Write|apikey.Admin) {
		t.Error("Has: a key that lacks one scope of a set was granted the set, or one with all of them was not")
	}
}

// TestRevokedKeyIsRefusedWithinOneSecond: two stores (two instances) on
// one database, each with the default cache, have verified a key; once
// one revokes it, both refuse it within MaxCacheTTL.
func TestRevokedKeyIsRefusedWithinOneSecond(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		ctx := context.Background()
		one, two := newStore(t, testdb.Open(t, d, nil), 0), newStore(t, testdb.Open(t, d, nil), 0)
		c, err := one.Create(ctx, "acme", apikey.Read, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []*apikey.Store{one, two} {
			if _, err := s.Verify(ctx, c.Token); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := one.Revoke(ctx, "acme", c.ID); err != nil {
			t.Fatal(err)
		}
		revoked := time.Now()
		for i, s := range []*apikey.Store{one, two} {
			for {
				_, err := s.Verify(ctx, c.Token)
				if errors.Is(err, apikey.ErrRefused) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if time.Since(revoked) > 5*apikey.MaxCacheTTL {
					t.Fatalf("instance %d still accepts the key %v after its revocation", i+1, time.Since(revoked))
				}
				time.Sleep(10 * time.Millisecond) // poll the state
			}
		}
		if took := time.Since(revoked); took > apikey.MaxCacheTTL {
			t.Fatalf("a revoked key was accepted for %v, want at most %v", took, apikey.MaxCacheTTL)
		}
	})
}

// TestKeysUnderRowLevelSecurity: as the application role (PostgreSQL,
// RLS binding), Verify and List work for each key's tenant, List shows one
// tenant's keys only, and the role cannot create or revoke keys.
func TestKeysUnderRowLevelSecurity(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	ctx := context.Background()
	admin := newStore(t, owner, 0)
	a, err := admin.Create(ctx, "acme", apikey.Read, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := admin.Create(ctx, "globex", apikey.Write, "b")
	if err != nil {
		t.Fatal(err)
	}
	app := newStore(t, testdb.App(t, owner, d), 0)
	for _, c := range []apikey.Created{a, b} {
		if k, err := app.Verify(ctx, c.Token); err != nil || k.Tenant != c.Tenant || k.ID != c.ID {
			t.Fatalf("verify as the application role: %+v, %v", k, err)
		}
	}
	for _, c := range []apikey.Created{a, b} {
		keys, err := app.List(ctx, c.Tenant)
		if err != nil || len(keys) != 1 || keys[0].ID != c.ID {
			t.Fatalf("list %s as the application role: %+v, %v", c.Tenant, keys, err)
		}
	}
	if _, err := app.Create(ctx, "acme", apikey.Read, ""); err == nil {
		t.Fatal("the application role created a key")
	}
	if _, err := app.Revoke(ctx, "acme", a.ID); err == nil {
		t.Fatal("the application role revoked a key")
	}
	if _, err := app.Verify(ctx, a.Token); err != nil {
		t.Fatalf("after the refused revoke: %v", err)
	}
}

// TestSecretsAreComparedInConstantTime reads the package's source: the
// hash comparison is crypto/subtle's, and nothing compares a hash or a
// secret with ==, bytes.Equal or the like, whose time depends on how much
// matched.
func TestSecretsAreComparedInConstantTime(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	subtle := 0
	suspicious := map[string]bool{"hash": true, "stored": true, "got": true, "want": true, "secret": true, "dummy": true, "digest": true}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					if pkg, ok := sel.X.(*ast.Ident); ok {
						switch pkg.Name + "." + sel.Sel.Name {
						case "subtle.ConstantTimeCompare":
							subtle++
						case "bytes.Equal", "bytes.Compare", "reflect.DeepEqual", "slices.Equal", "slices.Compare", "strings.Compare", "strings.EqualFold":
							t.Errorf("%s: %s.%s compares in variable time", fset.Position(n.Pos()), pkg.Name, sel.Sel.Name)
						}
					}
				}
			case *ast.BinaryExpr:
				if n.Op != token.EQL && n.Op != token.NEQ {
					return true
				}
				for _, side := range []ast.Expr{n.X, n.Y} {
					ast.Inspect(side, func(m ast.Node) bool {
						if c, ok := m.(*ast.CallExpr); ok {
							if f, ok := c.Fun.(*ast.Ident); ok && f.Name == "len" {
								return false // a length, not the bytes
							}
							if f, ok := c.Fun.(*ast.SelectorExpr); ok && f.Sel.Name == "ConstantTimeCompare" {
								return false // its answer, not the bytes
							}
						}
						if id, ok := m.(*ast.Ident); ok && suspicious[id.Name] {
							t.Errorf("%s: compares %s with %s", fset.Position(n.Pos()), id.Name, n.Op)
						}
						return true
					})
				}
			}
			return true
		})
	}
	if subtle != 1 {
		t.Errorf("%d calls of subtle.ConstantTimeCompare, want the one in matches", subtle)
	}
}

// TestARefusalDoesNotTellWhichTenantsExist: a made-up key of a tenant
// that exists is refused as fast as one of a tenant that does not, so
// timing refusals does not list the tenants. 200 trials of each,
// interleaved (the order alternating), after a warm-up; the medians must
// be within 0.67–1.5 of each other (a lookup that stops early for an
// unknown tenant takes about half as long). A round outside the bound is
// tried again, up to three rounds: a loaded machine may spoil one, a
// difference in the work spoils all three.
func TestARefusalDoesNotTellWhichTenantsExist(t *testing.T) {
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		refusalsTakeAsLong(t, newStore(t, db, 0))
	})
}

// TestARefusalUnderRowLevelSecurityDoesNotTellWhichTenantsExist: the same
// as the application role, where every lookup sets its tenant.
func TestARefusalUnderRowLevelSecurityDoesNotTellWhichTenantsExist(t *testing.T) {
	d := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, d, nil)
	refusalsTakeAsLong(t, newStore(t, testdb.App(t, owner, d), 0), newStore(t, owner, 0))
}

// refusalsTakeAsLong times s.Verify on made-up keys of an existing tenant
// and of a tenant that does not exist; admin (s when none) creates the
// tenant's key.
func refusalsTakeAsLong(t *testing.T, s *apikey.Store, admin ...*apikey.Store) {
	t.Helper()
	ctx := context.Background()
	creator := s
	if len(admin) > 0 {
		creator = admin[0]
	}
	if _, err := creator.Create(ctx, "acme", apikey.Read, ""); err != nil {
		t.Fatal(err)
	}
	const trials = 200
	random := func(tenantID string) string {
		b := make([]byte, 8+32)
		_, _ = rand.Read(b)
		return "rfk_" + tenantID + "_" + hex.EncodeToString(b[:8]) + "_" + hex.EncodeToString(b[8:])
	}
	refuse := func(text string) time.Duration {
		start := time.Now()
		_, err := s.Verify(ctx, text)
		took := time.Since(start)
		if !errors.Is(err, apikey.ErrRefused) {
			t.Fatalf("%s: %v, want ErrRefused", text, err)
		}
		return took
	}
	for range 20 { // warm up: connections, prepared statements, caches
		refuse(random("acme"))
		refuse(random("nosuchtenant"))
	}
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	var ratios []float64
	for round := 1; round <= 3; round++ {
		known, unknown := make([]string, trials), make([]string, trials)
		for i := range trials {
			known[i], unknown[i] = random("acme"), random("nosuchtenant")
		}
		var k, u []time.Duration
		for i := range trials {
			if i%2 == 0 {
				k = append(k, refuse(known[i]))
				u = append(u, refuse(unknown[i]))
			} else {
				u = append(u, refuse(unknown[i]))
				k = append(k, refuse(known[i]))
			}
		}
		mk, mu := median(k), median(u)
		ratio := float64(mk) / float64(mu)
		ratios = append(ratios, ratio)
		t.Logf("round %d: median refusal %s for an existing tenant, %s for an unknown one: ratio %.2f", round, mk, mu, ratio)
		if ratio >= 0.67 && ratio <= 1.5 {
			return
		}
	}
	t.Fatalf("a refusal's time tells whether the tenant exists: ratios of the medians %.2f in three rounds, want 0.67–1.5", ratios)
}

// TestCacheTTLBoundIsInclusive proves the documented bound at the limit
// and one past it: a CacheTTL of exactly MaxCacheTTL is accepted, one
// nanosecond more is an InputError.
func TestCacheTTLBoundIsInclusive(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		if _, err := apikey.New(db, &apikey.Options{CacheTTL: apikey.MaxCacheTTL}); err != nil {
			t.Fatalf("cache TTL of exactly MaxCacheTTL: %v, want it accepted", err)
		}
		if _, err := apikey.New(db, &apikey.Options{CacheTTL: apikey.MaxCacheTTL + time.Nanosecond}); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("cache TTL of MaxCacheTTL+1ns: %v, want an InputError", err)
		}
	})
}

// TestAVerifiedKeyIsServedFromTheCache proves the other half of the cache
// promise: within CacheTTL a key just verified is answered without a
// statement (here: under a cancelled context, which any statement would
// fail on), and with the cache off (a negative CacheTTL) it is not. An
// attempt whose two calls were further apart than the TTL proves nothing
// and is repeated.
func TestAVerifiedKeyIsServedFromTheCache(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		c, err := newStore(t, db, 0).Create(ctx, "acme", apikey.Read, "")
		if err != nil {
			t.Fatal(err)
		}
		for attempt := 0; ; attempt++ {
			s := newStore(t, db, apikey.MaxCacheTTL)
			if _, err := s.Verify(ctx, c.Token); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			k, err := s.Verify(cancelled, c.Token)
			if err == nil && k.ID == c.ID {
				break
			}
			if time.Since(start) < apikey.MaxCacheTTL/2 || attempt == 20 {
				t.Fatalf("a key verified just before, within its TTL: %+v, %v; want it from the cache", k, err)
			}
		}
		off := newStore(t, db, -1)
		if _, err := off.Verify(ctx, c.Token); err != nil {
			t.Fatal(err)
		}
		if _, err := off.Verify(cancelled, c.Token); err == nil {
			t.Fatal("with the cache off, a verify under a cancelled context succeeded: want every verify to read")
		}
	})
}

// TestKeyLengthBounds proves parse's length bound at the limit and past
// it: the shortest key there is (a one-character tenant) verifies, and
// texts one and two characters shorter (no tenant, no tenant nor its '_')
// are ErrMalformed, never a panic or a lookup.
func TestKeyLengthBounds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		s := newStore(t, db, -1)
		c, err := s.Create(ctx, "a", apikey.Read, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Token) != len("rfk_a_")+16+1+64 {
			t.Fatalf("token %q", c.Token)
		}
		if k, err := s.Verify(ctx, c.Token); err != nil || k.Tenant != "a" || k.ID != c.ID {
			t.Fatalf("the shortest key: %+v, %v; want it verified", k, err)
		}
		secret := c.Token[strings.LastIndexByte(c.Token, '_')+1:]
		for _, text := range []string{"rfk__" + c.ID + "_" + secret, "rfk_" + c.ID + "_" + secret, "rfk_" + c.ID + secret} {
			if _, err := s.Verify(ctx, text); !errors.Is(err, apikey.ErrMalformed) {
				t.Errorf("%q (%d characters): %v, want ErrMalformed", text, len(text), err)
			}
		}
	})
}
