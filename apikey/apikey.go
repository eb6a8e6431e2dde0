package apikey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/wire"
	"github.com/racefree/racefree/tenant"
)

//go:embed sql
var sqlFiles embed.FS

// Prefix starts every key: rfk_<tenant>_<id>_<secret>.
const Prefix = "rfk_"

const (
	idBytes     = 8  // 16 hex digits: names the key, in clear
	secretBytes = 32 // 64 hex digits: 256 random bits, of which only a SHA-256 is stored
	idLen       = 2 * idBytes
	secretLen   = 2 * secretBytes
	// MaxNameBytes bounds a key's name.
	MaxNameBytes = 200
)

// Cache bounds: a key revoked on one instance is refused by every other
// within MaxCacheTTL.
const (
	DefaultCacheTTL = 500 * time.Millisecond
	MaxCacheTTL     = time.Second
	maxCached       = 10_000
)

// Errors of Verify. Both mean "not authenticated" (HTTP 401); neither says
// which part of a key was wrong.
var (
	// ErrMalformed means the text is not a racefree key at all. Verify
	// returns it before touching the database.
	ErrMalformed = errors.New("racefree: not an API key")
	// ErrRefused means a well-formed key that is unknown, revoked, or whose
	// secret does not match.
	ErrRefused = errors.New("racefree: API key refused")
)

// Scope is a set of permissions a key grants.
type Scope uint8

// The scopes. They are independent: admin does not imply write.
const (
	Read  Scope = 1 << iota // GET routes
	Write                   // state-changing routes
	Admin                   // operator routes (the audit checkpoint)

	// AllScopes is every scope: the single --token of a single-tenant
	// set-up has them all.
	AllScopes = Read | Write | Admin
)

var scopeNames = []struct {
	s    Scope
	name string
}{{Read, "read"}, {Write, "write"}, {Admin, "admin"}}

// ParseScopes parses a comma-separated list of scope names (read, write,
// admin). It returns an InputError for an empty list or an unknown name.
func ParseScopes(text string) (Scope, error) {
	var s Scope
	for _, part := range strings.Split(text, ",") {
		part = strings.TrimSpace(part)
		found := false
		for _, n := range scopeNames {
			if part == n.name {
				s |= n.s
				found = true
			}
		}
		if !found {
			return 0, racefree.Invalid("scope", "must be a comma-separated list of read, write and admin, got %q", text)
		}
	}
	return s, nil
}

// String returns the scope names, comma-separated, in the order read,
// write, admin.
func (s Scope) String() string {
	var names []string
	for _, n := range scopeNames {
		if s&n.s != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// Has reports whether s grants every scope of want.
func (s Scope) Has(need Scope) bool { return s&need == need }

// Key describes an API key, never its secret.
type Key struct {
	Tenant    string
	ID        string
	Name      string
	Scopes    Scope
	CreatedAt time.Time
	RevokedAt time.Time // zero while the key is live
}

// Revoked reports whether the key is revoked.
func (k Key) Revoked() bool { return !k.RevokedAt.IsZero() }

// Created is a key as Create returns it: the only time its text exists.
type Created struct {
	Key
	// Token is the key itself, rfk_<tenant>_<id>_<secret>: show it once
	// and forget it. racefree keeps only the SHA-256 of its secret.
	Token string
}

// Options configures a Store.
type Options struct {
	// CacheTTL is how long Verify trusts a key it verified without asking
	// the database again: a key revoked meanwhile is refused once its
	// entry lapses, on every instance. At most MaxCacheTTL (one second).
	// Zero means DefaultCacheTTL (500ms); a negative value turns the cache
	// off.
	CacheTTL time.Duration
}

// Store manages the API keys of one database, and verifies them. It is
// safe for concurrent use.
type Store struct {
	db  *racefree.DB
	q   query.Set
	ttl time.Duration

	mu    sync.Mutex
	cache map[[sha256.Size]byte]cached
}

type cached struct {
	key   Key
	until time.Time // monotonic
}

// New returns the store of db. It does no I/O. A CacheTTL above
// MaxCacheTTL is an InputError.
func New(db *racefree.DB, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case o.CacheTTL > MaxCacheTTL:
		return nil, racefree.Invalid("cache TTL", "must be at most %v, so that a revoked key is refused within it", MaxCacheTTL)
	case o.CacheTTL == 0:
		o.CacheTTL = DefaultCacheTTL
	case o.CacheTTL < 0:
		o.CacheTTL = 0
	}
	return &Store{db: db, q: query.MustLoad(sqlFiles, "sql", db.Engine()), ttl: o.CacheTTL,
		cache: map[[sha256.Size]byte]cached{}}, nil
}

// Create makes a key of tenantID with scopes and an optional name, and
// returns it with its text (Created.Token), which is never shown again.
// It runs in [tenant.InTx] for tenantID, which registers the tenant.
func (s *Store) Create(ctx context.Context, tenantID string, scopes Scope, name string) (Created, error) {
	if err := tenant.Check(tenantID); err != nil {
		return Created{}, err
	}
	if err := checkScopes(scopes); err != nil {
		return Created{}, err
	}
	if name != "" {
		if err := racefree.CheckText("name", name, MaxNameBytes); err != nil {
			return Created{}, err
		}
	}
	id, secret := randomHex(idBytes), randomHex(secretBytes)
	hash := digest(secret)
	var created int64
	err := tenant.InTx(ctx, s.db, tenantID, func(ctx context.Context, tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, s.q.Get("create"), tenantID, id, hash[:], scopes.String(), name, wire.Of(s.db).ClockArg()).Scan(&created)
	})
	if err != nil {
		return Created{}, fmt.Errorf("apikey: create: %w", wire.Of(s.db).InterpretError(err))
	}
	return Created{
		Key:   Key{Tenant: tenantID, ID: id, Name: name, Scopes: scopes, CreatedAt: racefree.FromMillis(created)},
		Token: Prefix + tenantID + "_" + id + "_" + secret,
	}, nil
}

// List returns the keys of tenantID, oldest first, without secrets or
// hashes.
func (s *Store) List(ctx context.Context, tenantID string) ([]Key, error) {
	ctx, err := tenant.With(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	var keys []Key
	err = send.Run(ctx, s.db, s.db, func(exec racefree.Executor) error {
		keys = nil
		rows, err := exec.QueryContext(ctx, s.q.Get("list"), tenantID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			k := Key{Tenant: tenantID}
			var (
				scopes  string
				created int64
				revoked sql.NullInt64
			)
			if err := rows.Scan(&k.ID, &scopes, &k.Name, &created, &revoked); err != nil {
				return err
			}
			if k.Scopes, err = ParseScopes(scopes); err != nil {
				return fmt.Errorf("key %s: stored scopes: %w", k.ID, err)
			}
			k.CreatedAt = racefree.FromMillis(created)
			if revoked.Valid {
				k.RevokedAt = racefree.FromMillis(revoked.Int64)
			}
			keys = append(keys, k)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("apikey: list: %w", wire.Of(s.db).InterpretError(err))
	}
	return keys, nil
}

// Revoke revokes key id of tenantID and returns it. Revoking a revoked
// key changes nothing and returns it with the time of its first
// revocation. An unknown key is [racefree.ErrNotFound]; a malformed id an
// InputError. Every instance refuses the key within MaxCacheTTL.
func (s *Store) Revoke(ctx context.Context, tenantID, id string) (Key, error) {
	if err := tenant.Check(tenantID); err != nil {
		return Key{}, err
	}
	if err := CheckID(id); err != nil {
		return Key{}, err
	}
	k := Key{Tenant: tenantID, ID: id}
	err := tenant.InTx(ctx, s.db, tenantID, func(ctx context.Context, tx *sql.Tx) error {
		var (
			scopes           string
			created, revoked int64
		)
		if err := tx.QueryRowContext(ctx, s.q.Get("revoke"), tenantID, id, wire.Of(s.db).ClockArg()).Scan(&scopes, &k.Name, &created, &revoked); err != nil {
			return err
		}
		var err error
		k.Scopes, err = ParseScopes(scopes)
		k.CreatedAt, k.RevokedAt = racefree.FromMillis(created), racefree.FromMillis(revoked)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, fmt.Errorf("apikey: no key %s of tenant %s: %w", id, tenantID, racefree.ErrNotFound)
	}
	if err != nil {
		return Key{}, fmt.Errorf("apikey: revoke: %w", wire.Of(s.db).InterpretError(err))
	}
	return k, nil
}

// Verify returns the live key that text is. Text that is not a key is
// ErrMalformed, answered without touching the database (whether text has
// the form of a key is public; it tells nothing about which tenants or
// keys exist); a key that is unknown, revoked or whose secret does not
// match is ErrRefused. The key is read by its tenant and id (in clear in
// the text), under that tenant's row-level security, and its secret's
// SHA-256 is compared with the stored one in constant time. A key verified
// within the cache TTL (at most one second) is not read again.
//
// A refusal costs the same whether the tenant exists or not: the same
// statements ([send.ReadRow], which never registers the tenant, so anyone
// who makes up keys cannot fill the registry), and the same comparison,
// against a dummy digest when no key was found. Only verified keys are
// cached, keyed by the SHA-256 of the whole text, so a refused key is read
// every time, whoever's it is.
func (s *Store) Verify(ctx context.Context, text string) (Key, error) {
	tenantID, id, secret, ok := parse(text)
	if !ok {
		return Key{}, ErrMalformed
	}
	whole := sha256.Sum256([]byte(text))
	if k, ok := s.cached(whole); ok {
		return k, nil
	}
	tctx, err := tenant.With(ctx, tenantID)
	if err != nil {
		return Key{}, ErrMalformed // parse checked the tenant
	}
	k := Key{Tenant: tenantID, ID: id}
	var (
		stored  []byte
		scopes  string
		created int64
		revoked sql.NullInt64
	)
	err = send.ReadRow(tctx, s.db, s.db, s.q.Get("lookup"), []any{tenantID, id}, &stored, &scopes, &k.Name, &created, &revoked)
	found := err == nil
	if errors.Is(err, racefree.ErrNotFound) {
		err = nil
	}
	if err != nil {
		return Key{}, fmt.Errorf("apikey: verify: %w", wire.Of(s.db).InterpretError(err))
	}
	if !matches(secret, stored, found) || revoked.Valid {
		return Key{}, ErrRefused
	}
	if k.Scopes, err = ParseScopes(scopes); err != nil {
		return Key{}, fmt.Errorf("apikey: key %s: stored scopes: %w", id, err)
	}
	k.CreatedAt = racefree.FromMillis(created)
	s.remember(whole, k)
	return k, nil
}

// dummy is compared against when no key was found, so that an unknown id
// costs the same comparison as a wrong secret.
var dummy = sha256.Sum256([]byte("racefree: no such key"))

// matches compares the SHA-256 of secret with the stored hash in constant
// time (crypto/subtle): how long it takes says nothing about how much of
// the hash matched.
func matches(secret string, stored []byte, found bool) bool {
	got := digest(secret)
	want := stored
	if !found || len(want) != sha256.Size {
		want = dummy[:]
		found = false
	}
	return subtle.ConstantTimeCompare(got[:], want) == 1 && found
}

func digest(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }

func (s *Store) cached(whole [sha256.Size]byte) (Key, bool) {
	if s.ttl <= 0 {
		return Key{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cache[whole]
	if !ok {
		return Key{}, false
	}
	if !time.Now().Before(c.until) {
		delete(s.cache, whole)
		return Key{}, false
	}
	return c.key, true
}

func (s *Store) remember(whole [sha256.Size]byte, k Key) {
	if s.ttl <= 0 {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cache) >= maxCached {
		for h, c := range s.cache {
			if !now.Before(c.until) {
				delete(s.cache, h)
			}
		}
		if len(s.cache) >= maxCached {
			clear(s.cache)
		}
	}
	s.cache[whole] = cached{key: k, until: now.Add(s.ttl)}
}

// parse splits rfk_<tenant>_<id>_<secret>. The id and the secret have
// fixed lengths of lowercase hexadecimal digits, so the tenant, which may
// itself contain '_', is what lies between.
func parse(text string) (tenantID, id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(text, Prefix)
	if !ok || len(rest) < 1+1+idLen+1+secretLen {
		return "", "", "", false
	}
	n := len(rest)
	secret, id = rest[n-secretLen:], rest[n-secretLen-1-idLen:n-secretLen-1]
	tenantID = rest[:n-secretLen-1-idLen-1]
	if rest[n-secretLen-1] != '_' || rest[n-secretLen-1-idLen-1] != '_' ||
		!isHex(secret, secretLen) || !isHex(id, idLen) || tenant.Check(tenantID) != nil {
		return "", "", "", false
	}
	return tenantID, id, secret, true
}

// CheckID returns an InputError unless id has the form of a key id: 16
// lowercase hexadecimal digits.
func CheckID(id string) error {
	if !isHex(id, idLen) {
		return racefree.Invalid("id", "must be the %d lowercase hexadecimal digits of a key id", idLen)
	}
	return nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func checkScopes(s Scope) error {
	if s == 0 || s&^AllScopes != 0 {
		return racefree.Invalid("scope", "must be one or more of read, write and admin")
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b)
}
