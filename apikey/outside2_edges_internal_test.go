package apikey

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestOutside2EdgesTheCacheKeepsAKeyForItsOwnTTL: a verified key is
// cached for the store's own CacheTTL, whatever it is (a millisecond, the
// default, the one-second bound): its entry lapses CacheTTL after the
// Verify that cached it, neither sooner nor later. Read from the entry
// itself, so nothing waits.
func TestOutside2EdgesTheCacheKeepsAKeyForItsOwnTTL(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		for _, ttl := range []time.Duration{time.Millisecond, DefaultCacheTTL - time.Millisecond, DefaultCacheTTL, MaxCacheTTL} {
			s, err := New(db, &Options{CacheTTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			c, err := s.Create(ctx, "acme", Read, "")
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			if _, err := s.Verify(ctx, c.Token); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			s.mu.Lock()
			e, ok := s.cache[sha256.Sum256([]byte(c.Token))]
			s.mu.Unlock()
			if !ok {
				t.Fatalf("CacheTTL %v: the verified key is not cached", ttl)
			}
			if e.until.Before(before.Add(ttl)) || e.until.After(after.Add(ttl)) {
				t.Errorf("CacheTTL %v: the entry lapses %v after the Verify, want %v", ttl, e.until.Sub(before), ttl)
			}
		}
	})
}
