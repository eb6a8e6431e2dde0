package quota_test

import (
	"testing"

	"github.com/racefree/racefree/internal/testing/conformance"
)

// TestConformance runs the cases that package client also passes against
// a server: the library is the reference they are written from.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.LibraryQuotas(t)
}
