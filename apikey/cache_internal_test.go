package apikey

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
	"time"
)

// TestCacheIsBoundedAtMaxCached proves the cache's memory bound at the
// limit and one past it: remember keeps every live entry while fewer than
// maxCached are held, and, once maxCached are, drops the expired ones
// first and everything only when none has expired, so it never holds more
// than maxCached.
func TestCacheIsBoundedAtMaxCached(t *testing.T) {
	hash := func(i int) (h [sha256.Size]byte) {
		binary.BigEndian.PutUint64(h[:], uint64(i)+1)
		return h
	}
	fill := func(n, expired int) *Store {
		s := &Store{ttl: time.Second, cache: map[[sha256.Size]byte]cached{}}
		now := time.Now()
		for i := range n {
			until := now.Add(time.Hour)
			if i < expired {
				until = now.Add(-time.Hour)
			}
			s.cache[hash(i)] = cached{until: until}
		}
		return s
	}
	fresh := hash(maxCached + 1)

	s := fill(maxCached-1, 0)
	s.remember(fresh, Key{})
	if got := len(s.cache); got != maxCached {
		t.Fatalf("one below the bound: %d entries after remember, want all %d kept", got, maxCached)
	}

	s = fill(maxCached, 0)
	s.remember(fresh, Key{})
	if got := len(s.cache); got != 1 {
		t.Fatalf("at the bound, none expired: %d entries after remember, want 1 (cleared, then the new one)", got)
	}

	s = fill(maxCached, 10)
	s.remember(fresh, Key{})
	if got := len(s.cache); got != maxCached-10+1 {
		t.Fatalf("at the bound, 10 expired: %d entries after remember, want the %d live ones and the new one", got, maxCached-10)
	}
	if _, ok := s.cached(fresh); !ok {
		t.Fatal("the entry just remembered is not served")
	}
}
