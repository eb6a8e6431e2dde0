package claim_test

import (
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/conformance"
	"github.com/racefree/racefree/internal/testdb"
)

// TestConformance runs the cases that package client also passes against
// a server: the library is the reference they are written from.
func TestConformance(t *testing.T) {
	t.Parallel()
	clock := racefree.NewManualClock(conformance.T0)
	testdb.Each(t, &racefree.Config{Clock: clock}, func(t *testing.T, db *racefree.DB) {
		conformance.RunClaims(t, conformance.NewLibrary(db), clock)
	})
}
