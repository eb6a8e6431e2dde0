package dedup_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
)

// The tests of this file try, at their edges, what a third reading of
// dedup from outside found no test of: hexadecimal words and IDs in upper
// case, a fingerprint's source and level taken as given and its exact
// derivation, a result recorded again at the same fence, the stale-fence
// error's key, Observe alone beside the combined Observe (in a tenant,
// with its window), the field each refusal names, and Reap forgetting
// every event of a batch.

// TestOutside3EdgesNormaliseKeepsHexWordsAndFoldsIDsInEitherCase: a
// hexadecimal token without a digit is a word, kept whatever its length
// (deadbeef and cafebabe stay apart); one with a digit is an ID from 8
// characters on in upper case as in lower case, so two upper-case IDs of
// one event share a fingerprint and a window.
func TestOutside3EdgesNormaliseKeepsHexWordsAndFoldsIDsInEitherCase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"cache deadbeef missed":      "cache deadbeef missed",
		"cache CAFEBABE missed":      "cache cafebabe missed",
		"request A1B2C3D4 failed":    "request <id> failed",
		"request DEADBEEF42 failed":  "request <id> failed",
		"request 0XDEADBEEF1 failed": "request <id> failed",
		"request A1B2C3D failed":     "request a<n>b<n>c<n>d failed",
	} {
		if got := dedup.Normalise(in); got != want {
			t.Errorf("Normalise(%q) = %q, want %q", in, got, want)
		}
	}
	if a, b := dedup.Fingerprint("api", "error", "cache deadbeef missed"), dedup.Fingerprint("api", "error", "cache cafebabe missed"); a == b {
		t.Errorf("two messages apart by a hexadecimal word share the fingerprint %s", a)
	}
	if a, b := dedup.Fingerprint("api", "error", "request A1B2C3D4 failed"), dedup.Fingerprint("api", "error", "request E5F6A7B8 failed"); a != b {
		t.Errorf("two upper-case IDs of one event: fingerprints %s and %s, want one", a, b)
	}
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		for _, tc := range []struct {
			msg     string
			process bool
			count   int64
		}{
			{"cache deadbeef missed", true, 1},
			{"cache cafebabe missed", true, 1},
			{"request A1B2C3D4 failed", true, 1},
			{"request E5F6A7B8 failed", false, 2},
			{"request e5f6a7b9 failed", false, 3},
		} {
			o, err := log.Observe(ctx, db, dedup.Event{Source: "api", Level: "error", Message: tc.msg}, time.Minute)
			if err != nil || o.Process != tc.process || o.Count != tc.count {
				t.Fatalf("%q: %+v, %v; want process %v, count %d", tc.msg, o, err, tc.process, tc.count)
			}
		}
	})
}

// TestOutside3EdgesFingerprintTakesSourceAndLevelAsGiven: only the
// message is normalised; sources and levels that differ by a number, by
// case or by white space give other fingerprints and other windows. The
// fingerprint is the first 16 bytes of the SHA-256 of the source, the
// level and the normalised message, NUL-separated, in hex: the same value
// from one release to the next, so a stored fingerprint keeps matching.
func TestOutside3EdgesFingerprintTakesSourceAndLevelAsGiven(t *testing.T) {
	t.Parallel()
	h := sha256.Sum256([]byte("billing\x00error\x00charge <n> failed"))
	if got, want := dedup.Fingerprint("billing", "error", "Charge 7 failed"), hex.EncodeToString(h[:])[:32]; got != want {
		t.Errorf("Fingerprint(billing, error, Charge 7 failed) = %s, want %s", got, want)
	}
	base := dedup.Fingerprint("worker-1", "error", "m")
	for _, f := range [][3]string{
		{"worker-2", "error", "m"},
		{"Worker-1", "error", "m"},
		{"worker-1", "Error", "m"},
		{"worker-1 ", "error", "m"},
		{"worker-1", "error 2", "m"},
	} {
		if got := dedup.Fingerprint(f[0], f[1], f[2]); got == base {
			t.Errorf("Fingerprint%q = %s, the fingerprint of (worker-1, error, m)", f, got)
		}
	}
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		for _, ev := range []dedup.Event{
			{Source: "worker-1", Level: "error", Message: "m"},
			{Source: "worker-2", Level: "error", Message: "m"},
			{Source: "worker-1", Level: "Error", Message: "m"},
		} {
			if o, err := log.Observe(ctx, db, ev, time.Minute); err != nil || !o.Process || o.Count != 1 {
				t.Fatalf("%+v: %+v, %v; want a window of its own", ev, o, err)
			}
		}
	})
}

// TestOutside3EdgesRecordAgainAtTheSameFence records a result, then
// again at the same fence with its classification empty, then with its
// external id empty: each succeeds and overwrites the whole result, an
// empty field included, and Get reads it under the fingerprint asked for;
// the next window's winner records a result
// without an external id, and the previous one's is gone.
func TestOutside3EdgesRecordAgainAtTheSameFence(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		ev := dedup.Event{Source: "s", Level: "error", Message: "m", Fingerprint: "fp"}
		o, err := log.Observe(ctx, db, ev, time.Minute)
		if err != nil || !o.Process || o.Fence != 1 {
			t.Fatalf("%+v, %v", o, err)
		}
		for _, r := range []dedup.Result{
			{Classification: "card", ExternalID: "T-1"},
			{Classification: "card", ExternalID: "T-1"},
			{ExternalID: "T-2"},
			{Classification: "bank"},
		} {
			if err := log.Record(ctx, db, "fp", 1, r); err != nil {
				t.Fatalf("Record %+v at fence 1 again: %v", r, err)
			}
			if got, err := log.Get(ctx, db, "fp"); err != nil || got.Fingerprint != "fp" || got.Result != r || got.ResultFence != 1 {
				t.Fatalf("after Record %+v at fence 1: %+v, %v", r, got, err)
			}
		}
		if err := log.Record(ctx, db, "fp", 1, dedup.Result{Classification: "x", ExternalID: "T-3"}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if o, err := log.Observe(ctx, db, ev, time.Minute); err != nil || !o.Process || o.Fence != 2 {
			t.Fatalf("the second window: %+v, %v", o, err)
		}
		want := dedup.Result{Classification: "y"}
		if err := log.Record(ctx, db, "fp", 2, want); err != nil {
			t.Fatal(err)
		}
		if got, err := log.Get(ctx, db, "fp"); err != nil || got.Result != want || got.ResultFence != 2 {
			t.Fatalf("after the second window's record: %+v, %v; want %+v at fence 2", got, err, want)
		}
	})
}

// TestOutside3EdgesStaleFenceErrorNamesTheFingerprint: a Record at a
// fence a later window replaced is a *claim.StaleFenceError naming the
// fingerprint, the caller's fence and the current one, and its message
// speaks of the event.
func TestOutside3EdgesStaleFenceErrorNamesTheFingerprint(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		ev := dedup.Event{Source: "s", Level: "error", Message: "m", Fingerprint: "disk-full"}
		for range 3 {
			if _, err := log.Observe(ctx, db, ev, time.Minute); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Minute)
		}
		err := log.Record(ctx, db, "disk-full", 1, dedup.Result{Classification: "late"})
		var stale *claim.StaleFenceError
		if !errors.As(err, &stale) || stale.Key != "disk-full" || stale.Fence != 1 || stale.Current != 3 || !strings.Contains(err.Error(), `"disk-full"`) {
			t.Fatalf("Record at fence 1 of 3: %v (%+v); want a StaleFenceError of disk-full, fence 1, current 3", err, stale)
		}
		// What a user reads names the event, not a claim it never took.
		if msg := err.Error(); !strings.HasPrefix(msg, `dedup record "disk-full": fence 1 is stale`) || strings.Contains(msg, "claim") || !errors.Is(err, racefree.ErrStaleFence) {
			t.Errorf("Record at fence 1 of 3 says %q; want it to name the event and fence 1, not a claim", msg)
		}
	})
}

// TestOutside3EdgesObserveAloneAsCombined runs one tenant's sequence on
// the pool through the combiner, on the pool with the combiner off and in
// the caller's transaction (Observe alone): each way gives the same
// observations, stores the event under the tenant with its source and
// level as given (nothing under the default tenant), and elects again
// when the given window lapses, not DefaultWindow.
func TestOutside3EdgesObserveAloneAsCombined(t *testing.T) {
	t.Parallel()
	type step struct {
		process      bool
		fence, count int64
	}
	want := []step{{true, 1, 1}, {false, 1, 2}, {true, 2, 3}}
	for _, way := range []struct {
		name    string
		combine racefree.CombinePolicy
		inTx    bool
	}{
		{"combined", racefree.CombineOn, false},
		{"alone", racefree.CombineOff, false},
		{"in the caller's transaction", racefree.CombineDefault, true},
	} {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			eachWith(t, way.combine, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
				ctx := with(t, "acme")
				ev := dedup.Event{Source: "billing", Level: "error", Message: "charge 7 failed"}
				observe := func() *dedup.Observation {
					t.Helper()
					var o *dedup.Observation
					var err error
					if way.inTx {
						err = db.InTx(ctx, func(tx *sql.Tx) error {
							o, err = log.Observe(ctx, tx, ev, time.Minute)
							return err
						})
					} else {
						o, err = log.Observe(ctx, db, ev, time.Minute)
					}
					if err != nil {
						t.Fatal(err)
					}
					return o
				}
				for i, w := range want {
					if i == 2 {
						clock.Advance(time.Minute) // the window lapses at this exact millisecond
					}
					o := observe()
					if o.Process != w.process || o.Fence != w.fence || o.Count != w.count || o.Fingerprint != dedup.Fingerprint(ev.Source, ev.Level, ev.Message) {
						t.Fatalf("observation %d: %+v; want %+v", i+1, o, w)
					}
				}
				r, err := log.Get(ctx, db, dedup.Fingerprint(ev.Source, ev.Level, ev.Message))
				if err != nil || r.Source != ev.Source || r.Level != ev.Level || r.Message != ev.Message {
					t.Fatalf("acme's event: %+v, %v; want %+v", r, err, ev)
				}
				if err := log.Record(ctx, db, r.Fingerprint, 2, dedup.Result{Classification: "card"}); err != nil {
					t.Fatalf("acme's record at fence 2: %v", err)
				}
				if r, err := log.Get(context.Background(), db, r.Fingerprint); !errors.Is(err, racefree.ErrNotFound) {
					t.Fatalf("the default tenant's event: %+v, %v; want ErrNotFound", r, err)
				}
			})
		})
	}
}

// TestOutside3EdgesRefusalsNameTheirField: each refused argument is an
// InputError whose Field names it (the server answers with it), never a
// neighbour's.
func TestOutside3EdgesRefusalsNameTheirField(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		field := func(what, want string, err error) {
			t.Helper()
			var ie *racefree.InputError
			if !errors.As(err, &ie) || ie.Field != want {
				t.Errorf("%s: %v, want an InputError of %s", what, err, want)
			}
		}
		ok := dedup.Event{Source: "s", Level: "l", Message: "m"}
		observe := func(ev dedup.Event, window time.Duration) error {
			_, err := log.Observe(ctx, db, ev, window)
			return err
		}
		field("a window below MinTTL", "window", observe(ok, claim.MinTTL-time.Microsecond))
		field("a window above MaxTTL", "window", observe(ok, claim.MaxTTL+time.Millisecond))
		field("a negative window", "window", observe(ok, -time.Minute))
		field("an empty source", "source", observe(dedup.Event{Level: "l", Message: "m"}, time.Minute))
		field("an empty level", "level", observe(dedup.Event{Source: "s", Message: "m"}, time.Minute))
		field("a level of MaxLevelBytes + 1", "level", observe(dedup.Event{Source: "s", Level: strings.Repeat("l", dedup.MaxLevelBytes+1), Message: "m"}, time.Minute))
		field("a message not UTF-8", "message", observe(dedup.Event{Source: "s", Level: "l", Message: "\xff"}, time.Minute))
		field("a fingerprint with a NUL byte", "fingerprint", observe(dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: "f\x00"}, time.Minute))
		field("Record: a fence of 0", "fence", log.Record(ctx, db, "fp", 0, dedup.Result{}))
		field("Record: a classification with a NUL byte", "classification", log.Record(ctx, db, "fp", 1, dedup.Result{Classification: "c\x00"}))
		field("Record: an external id with a NUL byte", "external_id", log.Record(ctx, db, "fp", 1, dedup.Result{ExternalID: "e\x00"}))
		_, err := log.Reap(ctx, -time.Millisecond, 0)
		field("Reap: a negative grace", "grace", err)
		if n := stored(t, db); n != 0 {
			t.Fatalf("%d rows after the refusals, want none", n)
		}
	})
}

// TestOutside3EdgesReapForgetsEveryEventOfABatch forgets four lapsed
// fingerprints in one batch, each with a result, one holding a quote and
// one a backslash: each one's event goes with its claim, so each observed
// again starts a new event, with its new text and no result, at a fence
// above its old one.
func TestOutside3EdgesReapForgetsEveryEventOfABatch(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		fps := []string{"fp-a", "fp-b", `say "hi"`, `C:\tmp\`}
		for _, fp := range fps {
			o, err := log.Observe(ctx, db, dedup.Event{Source: "s", Level: "l", Message: "old", Fingerprint: fp}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := log.Record(ctx, db, fp, o.Fence, dedup.Result{Classification: "old"}); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Minute)
		if n, err := log.Reap(ctx, 0, 10); err != nil || n != 4 {
			t.Fatalf("Reap of four lapsed fingerprints in one batch: %d, %v", n, err)
		}
		if n := stored(t, db); n != 0 {
			t.Fatalf("%d rows after the reap, want none", n)
		}
		for _, fp := range fps {
			o, err := log.Observe(ctx, db, dedup.Event{Source: "s2", Level: "l2", Message: "new", Fingerprint: fp}, time.Minute)
			if err != nil || !o.Process || o.Fence <= 1 || o.Count != 1 {
				t.Fatalf("%s observed again: %+v, %v; want a new window above fence 1", fp, o, err)
			}
			want := dedup.Record{Fingerprint: fp, Source: "s2", Level: "l2", Message: "new"}
			if r, err := log.Get(ctx, db, fp); err != nil || *r != want {
				t.Fatalf("%s observed again: %+v, %v; want %+v", fp, r, err, want)
			}
		}
	})
}
