package dedup_test

import (
	"context"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dedup"
)

// The tests of this file try, at its edge, what a reading of dedup from
// outside found no test of: a UUID written in upper case.

// TestOutsideEdgesNormaliseFoldsAUUIDInEitherCase folds one UUID written
// in lower case, in upper case and in mixed case to the same <id>, so
// that the same event logged by two services that print IDs differently
// shares one fingerprint and one window.
func TestOutsideEdgesNormaliseFoldsAUUIDInEitherCase(t *testing.T) {
	t.Parallel()
	const want = "user <id> not found"
	for _, id := range []string{
		"3f2a9c1e-0b7d-4c7e-9a51-2f1d3c4b5a69",
		"3F2A9C1E-0B7D-4C7E-9A51-2F1D3C4B5A69",
		"3f2a9c1e-0B7D-4c7e-9A51-2f1d3c4b5a69",
	} {
		if got := dedup.Normalise("User " + id + " not found"); got != want {
			t.Errorf("Normalise of a UUID %s: %q, want %q", id, got, want)
		}
	}
	lower := dedup.Fingerprint("api", "error", "user 3f2a9c1e-0b7d-4c7e-9a51-2f1d3c4b5a69 not found")
	upper := dedup.Fingerprint("api", "error", "user 3F2A9C1E-0B7D-4C7E-9A51-2F1D3C4B5A69 not found")
	if lower != upper {
		t.Errorf("the fingerprints of one UUID in lower and upper case differ: %s, %s", lower, upper)
	}
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		for i, msg := range []string{
			"user 3f2a9c1e-0b7d-4c7e-9a51-2f1d3c4b5a69 not found",
			"User 3F2A9C1E-0B7D-4C7E-9A51-2F1D3C4B5A69 not found",
		} {
			o, err := log.Observe(ctx, db, dedup.Event{Source: "api", Level: "error", Message: msg}, time.Minute)
			if err != nil || o.Fingerprint != lower || o.Process != (i == 0) || o.Count != int64(i+1) {
				t.Fatalf("occurrence %d, %q: %+v, %v; want fingerprint %s, count %d, processed by the first alone", i+1, msg, o, err, lower, i+1)
			}
		}
	})
}
