package apikey

import (
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestEdgesCacheTTLOption tries the store's one option with and without
// it: no Options and a zero CacheTTL are DefaultCacheTTL (500ms, not the
// one-second bound), a negative one turns the cache off, and a CacheTTL
// given is kept as it is, up to MaxCacheTTL.
func TestEdgesCacheTTLOption(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		for name, c := range map[string]struct {
			opts *Options
			want int64
		}{
			"no options":        {nil, int64(DefaultCacheTTL)},
			"zero":              {&Options{}, int64(DefaultCacheTTL)},
			"off":               {&Options{CacheTTL: -1}, 0},
			"one millisecond":   {&Options{CacheTTL: 1e6}, 1e6},
			"exactly the bound": {&Options{CacheTTL: MaxCacheTTL}, int64(MaxCacheTTL)},
		} {
			s, err := New(db, c.opts)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if int64(s.ttl) != c.want {
				t.Errorf("%s: the cache keeps a key %v, want %v", name, s.ttl, c.want)
			}
		}
	})
}
