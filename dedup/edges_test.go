package dedup_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// The tests of this file try the dedup promises at their edges (the
// boundary matrix of docs/contributing.md): each limit at the limit and
// one past it, two values that differ in one dimension alone, what the
// derived fingerprint covers, the caller's transaction committed and
// rolled back, a caller cancelled at each stage, and an outcome the
// caller never heard.

// stored counts the claim and event rows of every namespace and tenant.
func stored(t *testing.T, db *racefree.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(),
		`SELECT (SELECT count(*) FROM racefree_claims) + (SELECT count(*) FROM racefree_dedup_events)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// expiry is when the window of fingerprint fp lapses.
func expiry(t *testing.T, db *racefree.DB, fp string) time.Time {
	t.Helper()
	c, err := claim.NewNamespace(db, dedup.Namespace).Get(context.Background(), db, fp)
	if err != nil {
		t.Fatal(err)
	}
	return c.ExpiresAt
}

// TestEdgesInputBounds tries each text limit at the limit and one byte
// past it (a source of MaxSourceBytes, a level of MaxLevelBytes, a
// message of MaxMessageBytes, a fingerprint of claim.MaxKeyBytes, a
// classification and an external id of MaxResultBytes; a message one
// byte over by a character of two bytes): at the limit Observe, Record
// and Get work and keep the text whole, one past it is an InputError
// that writes nothing.
func TestEdgesInputBounds(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		of := func(n int) string { return strings.Repeat("a", n) }
		full := dedup.Event{Source: of(dedup.MaxSourceBytes), Level: of(dedup.MaxLevelBytes),
			Message: of(dedup.MaxMessageBytes), Fingerprint: of(claim.MaxKeyBytes)}
		o, err := log.Observe(ctx, db, full, time.Minute)
		if err != nil || !o.Process || o.Fingerprint != full.Fingerprint {
			t.Fatalf("every field at its limit: %+v, %v", o, err)
		}
		derived := full
		derived.Fingerprint = ""
		if o, err := log.Observe(ctx, db, derived, time.Minute); err != nil || !o.Process || len(o.Fingerprint) != 32 {
			t.Fatalf("every field at its limit, fingerprint derived: %+v, %v", o, err)
		}
		result := dedup.Result{Classification: of(dedup.MaxResultBytes), ExternalID: of(dedup.MaxResultBytes)}
		if err := log.Record(ctx, db, full.Fingerprint, o.Fence, result); err != nil {
			t.Fatalf("a result at its limits: %v", err)
		}
		r, err := log.Get(ctx, db, full.Fingerprint)
		if err != nil || r.Source != full.Source || r.Level != full.Level || r.Message != full.Message || r.Result != result {
			t.Fatalf("the event at the limits, read back: %v; want every field whole", err)
		}

		before := stored(t, db)
		refused := func(what string, err error) {
			t.Helper()
			var ie *racefree.InputError
			if !errors.As(err, &ie) {
				t.Errorf("%s: %v, want an InputError", what, err)
			}
		}
		for what, ev := range map[string]dedup.Event{
			"a source of MaxSourceBytes + 1":         {Source: of(dedup.MaxSourceBytes + 1), Level: "l", Message: "m"},
			"a level of MaxLevelBytes + 1":           {Source: "s", Level: of(dedup.MaxLevelBytes + 1), Message: "m"},
			"a message of MaxMessageBytes + 1":       {Source: "s", Level: "l", Message: of(dedup.MaxMessageBytes + 1)},
			"a message one byte over by a character": {Source: "s", Level: "l", Message: of(dedup.MaxMessageBytes-1) + "é"},
			"a fingerprint of MaxKeyBytes + 1":       {Source: "s", Level: "l", Message: "m", Fingerprint: of(claim.MaxKeyBytes + 1)},
		} {
			_, err := log.Observe(ctx, db, ev, time.Minute)
			refused("Observe: "+what, err)
		}
		refused("Record: a fingerprint of MaxKeyBytes + 1", log.Record(ctx, db, of(claim.MaxKeyBytes+1), 1, dedup.Result{}))
		refused("Record: a classification of MaxResultBytes + 1",
			log.Record(ctx, db, full.Fingerprint, o.Fence, dedup.Result{Classification: of(dedup.MaxResultBytes + 1)}))
		refused("Record: an external id of MaxResultBytes + 1",
			log.Record(ctx, db, full.Fingerprint, o.Fence, dedup.Result{ExternalID: of(dedup.MaxResultBytes + 1)}))
		_, err = log.Get(ctx, db, of(claim.MaxKeyBytes+1))
		refused("Get: a fingerprint of MaxKeyBytes + 1", err)
		if after := stored(t, db); after != before {
			t.Fatalf("%d rows after the refusals, want %d", after, before)
		}
		if r, err := log.Get(ctx, db, full.Fingerprint); err != nil || r.Result != result {
			t.Fatalf("the result after refused records: %+v, %v; want it as recorded", r, err)
		}
	})
}

// TestEdgesWindowBounds tries the window at its limits: a window of
// claim.MinTTL elects again exactly one millisecond later; one of
// claim.MaxTTL lapses that far ahead; without a window (0) Observe uses
// DefaultWindow, and elects again at its exact millisecond, not one
// before; a window below MinTTL, above MaxTTL by a millisecond, or
// negative, is an InputError that writes nothing.
func TestEdgesWindowBounds(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		ev := func(fp string) dedup.Event {
			return dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: fp}
		}
		observe := func(fp string, window time.Duration, process bool, fence, count int64) {
			t.Helper()
			o, err := log.Observe(ctx, db, ev(fp), window)
			if err != nil || o.Process != process || o.Fence != fence || o.Count != count {
				t.Fatalf("%s at %v (window %v): %+v, %v; want process %v, fence %d, count %d",
					fp, clock.Now().Sub(t0), window, o, err, process, fence, count)
			}
		}
		observe("min", claim.MinTTL, true, 1, 1)
		observe("min", claim.MinTTL, false, 1, 2)
		observe("max", claim.MaxTTL, true, 1, 1)
		if got := expiry(t, db, "max"); !got.Equal(t0.Add(claim.MaxTTL)) {
			t.Fatalf("a window of MaxTTL lapses at %v, want %v", got, t0.Add(claim.MaxTTL))
		}
		observe("default", 0, true, 1, 1)
		if got := expiry(t, db, "default"); !got.Equal(t0.Add(dedup.DefaultWindow)) {
			t.Fatalf("without a window the claim lapses at %v, want DefaultWindow later (%v)", got, t0.Add(dedup.DefaultWindow))
		}
		clock.Advance(claim.MinTTL)
		observe("min", claim.MinTTL, true, 2, 3)
		clock.Set(t0.Add(dedup.DefaultWindow - time.Millisecond))
		observe("default", 0, false, 1, 2)
		clock.Advance(time.Millisecond)
		observe("default", 0, true, 2, 3)

		before := stored(t, db)
		for _, w := range []time.Duration{claim.MinTTL - time.Nanosecond, claim.MaxTTL + time.Millisecond, -time.Nanosecond} {
			var ie *racefree.InputError
			if _, err := log.Observe(ctx, db, ev("refused"), w); !errors.As(err, &ie) {
				t.Errorf("a window of %v: %v, want an InputError", w, err)
			}
		}
		if after := stored(t, db); after != before {
			t.Fatalf("%d rows after refused windows, want %d", after, before)
		}
	})
}

// TestEdgesFingerprintCoversEachField changes each field the derived
// fingerprint covers alone (the source, the level, the message beyond
// what Normalise folds, and where one field ends and the next begins)
// and expects another fingerprint, and so another window; what Normalise
// folds changes nothing. An event given its fingerprint (Event.Fingerprint)
// shares the window of the same event without one when the two agree,
// and has a window of its own when they do not.
func TestEdgesFingerprintCoversEachField(t *testing.T) {
	t.Parallel()
	base := dedup.Fingerprint("billing", "error", "charge 7 failed")
	if len(base) != 32 {
		t.Fatalf("a fingerprint of %d characters, want 32", len(base))
	}
	for _, f := range [][3]string{
		{"billing", "error", "Charge 8  FAILED"}, // folded: the same
	} {
		if got := dedup.Fingerprint(f[0], f[1], f[2]); got != base {
			t.Errorf("Fingerprint%q = %s, want %s (only folded apart)", f, got, base)
		}
	}
	for _, f := range [][3]string{
		{"billing2", "error", "charge 7 failed"},
		{"billing", "warn", "charge 7 failed"},
		{"billing", "error", "charge 7 refused"},
		{"billin", "gerror", "charge 7 failed"}, // the source's end moved into the level
		{"billing", "erro", "rcharge 7 failed"}, // the level's end moved into the message
	} {
		if got := dedup.Fingerprint(f[0], f[1], f[2]); got == base {
			t.Errorf("Fingerprint%q = %s, the fingerprint of (billing, error, charge 7 failed)", f, got)
		}
	}
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		observe := func(ev dedup.Event, process bool, count int64) *dedup.Observation {
			t.Helper()
			o, err := log.Observe(ctx, db, ev, time.Minute)
			if err != nil || o.Process != process || o.Count != count {
				t.Fatalf("%+v: %+v, %v; want process %v, count %d", ev, o, err, process, count)
			}
			return o
		}
		ev := dedup.Event{Source: "billing", Level: "error", Message: "charge 7 failed"}
		if o := observe(ev, true, 1); o.Fingerprint != base {
			t.Fatalf("the derived fingerprint %s, want %s", o.Fingerprint, base)
		}
		given := ev
		given.Fingerprint = base
		observe(given, false, 2)
		given.Fingerprint = "mine"
		observe(given, true, 1)
		observe(dedup.Event{Source: "billing", Level: "warn", Message: "charge 7 failed"}, true, 1)
		observe(dedup.Event{Source: "billin", Level: "gerror", Message: "charge 7 failed"}, true, 1)
		observe(dedup.Event{Source: "billing", Level: "error", Message: "Charge 12 failed"}, false, 3)
	})
}

// TestEdgesNormaliseAtTheIDLength tries Normalise where it changes how it
// reads a token: a hexadecimal token with a digit is an ID from 8
// characters on (with or without 0x), and below that its digits fold as
// numbers.
func TestEdgesNormaliseAtTheIDLength(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"request deadbee7 failed": "request <id> failed",
		"request deadbe7 failed":  "request deadbe<n> failed",
		"request 0xabcde1 failed": "request <id> failed",
		"request 0xabcd1 failed":  "request <n>xabcd<n> failed",
		"request 1234567 failed":  "request <n> failed",
		"request 12345678 failed": "request <id> failed",
	} {
		if got := dedup.Normalise(in); got != want {
			t.Errorf("Normalise(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEdgesRecordKeepsFingerprintsAndNamespacesApart: a claim of the
// same key in another namespace (one that sorts before dedup's, at
// another fence) is no fingerprint's window: Record judges the fence by
// dedup's claim alone, and writes the fingerprint's event alone, never
// another fingerprint's of the same tenant at the same fence; Reap
// forgets dedup's lapsed fingerprints and leaves the other namespace's
// lapsed claim of the same key.
func TestEdgesRecordKeepsFingerprintsAndNamespacesApart(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		alerts := claim.NewNamespace(db, "alerts")
		first, err := alerts.Acquire(ctx, db, "fp", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := alerts.Release(ctx, db, "fp", "a", first.Fence); err != nil {
			t.Fatal(err)
		}
		other, err := alerts.Acquire(ctx, db, "fp", "a", time.Minute)
		if err != nil || other.Fence != 2 {
			t.Fatalf("the other namespace's second tenure: %+v, %v; want fence 2", other, err)
		}
		for _, fp := range []string{"fp", "fp2"} {
			if o, err := log.Observe(ctx, db, dedup.Event{Source: "s", Level: "l", Message: fp, Fingerprint: fp}, time.Minute); err != nil || o.Fence != 1 {
				t.Fatalf("observe %s: %+v, %v; want fence 1", fp, o, err)
			}
		}
		if err := log.Record(ctx, db, "fp", other.Fence, dedup.Result{Classification: "alerts'"}); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("record at the other namespace's fence: %v, want ErrNotHeld (ahead of dedup's)", err)
		}
		if err := log.Record(ctx, db, "fp", 1, dedup.Result{Classification: "one", ExternalID: "T-1"}); err != nil {
			t.Fatalf("record at dedup's fence: %v", err)
		}
		if r, err := log.Get(ctx, db, "fp2"); err != nil || r.Classification != "" || r.ResultFence != 0 {
			t.Fatalf("fp2 after fp's record: %+v, %v; want no result", r, err)
		}
		if err := log.Record(ctx, db, "fp2", 1, dedup.Result{Classification: "two"}); err != nil {
			t.Fatal(err)
		}
		if r, err := log.Get(ctx, db, "fp"); err != nil || r.Classification != "one" || r.ExternalID != "T-1" || r.Message != "fp" {
			t.Fatalf("fp after fp2's record: %+v, %v; want its own result", r, err)
		}
		if c, err := alerts.Get(ctx, db, "fp"); err != nil || c.Fence != other.Fence || c.Count != 2 {
			t.Fatalf("the other namespace's claim: %+v, %v; want it as it was", c, err)
		}

		clock.Advance(2 * time.Minute) // every window and claim lapsed a minute ago
		if n, err := log.Reap(ctx, time.Minute, 0); err != nil || n != 2 {
			t.Fatalf("reap: %d, %v; want dedup's 2", n, err)
		}
		if c, err := alerts.Get(ctx, db, "fp"); err != nil || c.Fence != other.Fence {
			t.Fatalf("the other namespace's lapsed claim after dedup's reap: %+v, %v; want it kept", c, err)
		}
	})
}

// TestEdgesReapAtTheExactMillisecond: Reap forgets a fingerprint whose
// window lapsed exactly grace ago and keeps one that lapsed a
// millisecond later; a grace of 0 forgets a window at the millisecond it
// lapses; a negative grace is an InputError; a batch of 1 goes on until
// none is left, and a batch of 0 is the default.
func TestEdgesReapAtTheExactMillisecond(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		observe := func(fp string) {
			t.Helper()
			if _, err := log.Observe(ctx, db, dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: fp}, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		gone := func(fp string, want bool) {
			t.Helper()
			_, err := log.Get(ctx, db, fp)
			if got := errors.Is(err, racefree.ErrNotFound); got != want || (!got && err != nil) {
				t.Fatalf("%s: %v; want forgotten %v", fp, err, want)
			}
		}
		reap := func(grace time.Duration, batch int, want int64) {
			t.Helper()
			if n, err := log.Reap(ctx, grace, batch); err != nil || n != want {
				t.Fatalf("reap (grace %v, batch %d) at %v: %d, %v; want %d", grace, batch, clock.Now().Sub(t0), n, err, want)
			}
		}
		observe("edge") // lapses at +1m
		clock.Advance(time.Millisecond)
		observe("later") // lapses at +1m1ms
		clock.Set(t0.Add(time.Minute + time.Hour))
		reap(time.Hour, 1, 1)
		gone("edge", true)
		gone("later", false)
		clock.Advance(time.Millisecond)
		reap(time.Hour, 1, 1)
		gone("later", true)

		observe("zero")
		clock.Advance(time.Minute - time.Millisecond)
		reap(0, 0, 0)
		clock.Advance(time.Millisecond)
		reap(0, 0, 1)
		gone("zero", true)

		for _, fp := range []string{"a", "b", "c"} {
			observe(fp)
		}
		clock.Advance(time.Minute)
		var ie *racefree.InputError
		if _, err := log.Reap(ctx, -time.Nanosecond, 1); !errors.As(err, &ie) {
			t.Fatalf("a negative grace: %v, want an InputError", err)
		}
		reap(0, 1, 3)
		if n := stored(t, db); n != 0 {
			t.Fatalf("%d rows after every window was reaped, want none", n)
		}
	})
}

// TestEdgesCallsInTheCallersTransaction runs Observe, Record and Get in
// the caller's transaction: Get there reads what the transaction wrote;
// rolled back, a later reader on the pool sees none of it (no event, no
// count, no result); committed, it sees each.
func TestEdgesCallsInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		boom := errors.New("caller failed")
		// On SQLite a call outside the caller's transaction would wait for
		// the write lock that transaction holds: bound it.
		bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ev := func(fp string) dedup.Event {
			return dedup.Event{Source: "s", Level: "l", Message: "text of " + fp, Fingerprint: fp}
		}
		if _, err := log.Observe(ctx, db, ev("kept"), time.Minute); err != nil {
			t.Fatal(err)
		}
		// Rolled back: an Observe of a new and of a known fingerprint, a
		// Record, each read back inside.
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			o, err := log.Observe(bounded, tx, ev("new"), time.Minute)
			if err != nil {
				return err
			}
			if r, err := log.Get(bounded, tx, "new"); err != nil || r.Message != "text of new" {
				t.Errorf("Get in the transaction of the event it observed: %+v, %v", r, err)
			}
			if err := log.Record(bounded, tx, "new", o.Fence, dedup.Result{Classification: "c"}); err != nil {
				return err
			}
			if r, err := log.Get(bounded, tx, "new"); err != nil || r.Classification != "c" {
				t.Errorf("Get in the transaction of the result it recorded: %+v, %v", r, err)
			}
			if o, err := log.Observe(bounded, tx, ev("kept"), time.Minute); err != nil || o.Count != 2 {
				t.Errorf("observe of kept in the transaction: %+v, %v; want count 2", o, err)
			}
			if err := log.Record(bounded, tx, "kept", 1, dedup.Result{Classification: "rolled back"}); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if _, err := log.Get(ctx, db, "new"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("new after the rollback: %v, want ErrNotFound", err)
		}
		if r, err := log.Get(ctx, db, "kept"); err != nil || r.Classification != "" {
			t.Fatalf("kept after a rolled-back record: %+v, %v; want no result", r, err)
		}
		if o, err := log.Observe(ctx, db, ev("kept"), time.Minute); err != nil || o.Count != 2 {
			t.Fatalf("kept after a rolled-back observation: %+v, %v; want count 2", o, err)
		}
		// Committed: the pool sees the count and the result.
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := log.Observe(bounded, tx, ev("kept"), time.Minute); err != nil {
				return err
			}
			return log.Record(bounded, tx, "kept", 1, dedup.Result{Classification: "committed"})
		}); err != nil {
			t.Fatal(err)
		}
		if r, err := log.Get(ctx, db, "kept"); err != nil || r.Classification != "committed" || r.ResultFence != 1 {
			t.Fatalf("kept after a committed record: %+v, %v", r, err)
		}
		if o, err := log.Observe(ctx, db, ev("kept"), time.Minute); err != nil || o.Count != 4 {
			t.Fatalf("kept after a committed observation: %+v, %v; want count 4", o, err)
		}
	})
}

// TestEdgesCancelledCaller cancels Observe, Record, Get and Reap before
// they are sent (the context's error, nothing written), the caller's
// transaction before its commit (nothing of it seen later), and, on
// PostgreSQL, a call on the pool while it waits for the row lock of the
// fingerprint's claim, which a caller's transaction holds: an Observe
// runs in a transaction of its own, whose COMMIT was never sent, so it
// gets the context's error and was not counted; a Record is one
// statement whose COMMIT left with it, so it gets the context's error
// with racefree.ErrUnavailable (the server may record it, unless the
// cancel request pgx sends on closing the connection arrives first), and
// recording again at the same fence settles it.
func TestEdgesCancelledCaller(t *testing.T) {
	t.Parallel()
	eachWith(t, racefree.CombineOff, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ev := dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: "fp"}
		gone, stop := context.WithCancel(ctx)
		stop()
		if _, err := log.Observe(gone, db, ev, time.Minute); !errors.Is(err, context.Canceled) {
			t.Fatalf("observe with a cancelled context: %v, want context.Canceled", err)
		}
		if n := stored(t, db); n != 0 {
			t.Fatalf("%d rows after a cancelled observe, want none", n)
		}
		o, err := log.Observe(ctx, db, ev, time.Minute)
		if err != nil || o.Count != 1 {
			t.Fatalf("observe: %+v, %v; want count 1", o, err)
		}
		if err := log.Record(gone, db, "fp", o.Fence, dedup.Result{Classification: "c"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("record with a cancelled context: %v, want context.Canceled", err)
		}
		if _, err := log.Get(gone, db, "fp"); !errors.Is(err, context.Canceled) {
			t.Fatalf("get with a cancelled context: %v, want context.Canceled", err)
		}
		clock.Advance(time.Hour)
		if _, err := log.Reap(gone, 0, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("reap with a cancelled context: %v, want context.Canceled", err)
		}
		clock.Set(t0)
		if r, err := log.Get(ctx, db, "fp"); err != nil || r.Classification != "" {
			t.Fatalf("after a cancelled record and reap: %+v, %v; want the event, no result", r, err)
		}

		// In the caller's transaction, cancelled before its commit.
		txCtx, stopTx := context.WithCancel(ctx)
		tx, err := db.SQL().BeginTx(txCtx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if o, err := log.Observe(txCtx, tx, ev, time.Minute); err != nil || o.Count != 2 {
			t.Fatalf("observe in the transaction: %+v, %v", o, err)
		}
		if err := log.Record(txCtx, tx, "fp", 1, dedup.Result{Classification: "c"}); err != nil {
			t.Fatal(err)
		}
		stopTx()
		if err := tx.Commit(); err == nil {
			t.Fatal("the commit of a transaction whose context ended succeeded")
		}
		if r, err := log.Get(ctx, db, "fp"); err != nil || r.Classification != "" {
			t.Fatalf("after the cancelled transaction: %+v, %v; want no result", r, err)
		}
		if o, err := log.Observe(ctx, db, ev, time.Minute); err != nil || o.Count != 2 {
			t.Fatalf("observe after the cancelled transaction: %+v, %v; want count 2", o, err)
		}

		// The combiner is off here: with it, an Observe on the pool
		// waits for the lock inside its batch, which then runs to its end
		// on a context of its own (wire.DB.Combine).
		if db.Engine() != racefree.Postgres {
			return
		}
		holder, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Rollback() }()
		if o, err := log.Observe(ctx, holder, ev, time.Minute); err != nil || o.Count != 3 {
			t.Fatalf("observe in the holder: %+v, %v; want count 3", o, err)
		}
		pid := testdb.BackendPID(t, holder)
		// wait runs call until it waits for the holder's row lock,
		// cancels it, and returns its error once the server has let go
		// of it (pgx, closing the connection, asks the server to cancel
		// the statement too; a statement whose transaction committed on
		// its own may commit before that request arrives).
		wait := func(call func(ctx context.Context) error) error {
			t.Helper()
			waitCtx, stopWait := context.WithCancel(ctx)
			defer stopWait()
			done := make(chan error, 1)
			go func() { done <- call(waitCtx) }()
			if !testdb.BlockedBy(t, db, pid, nil) {
				t.Fatal("the call did not wait for the holder's row lock")
			}
			stopWait()
			err := <-done
			testdb.Unblocked(t, db, pid, 10*time.Second)
			return err
		}
		err = wait(func(ctx context.Context) error { _, err := log.Observe(ctx, db, ev, time.Minute); return err })
		if !errors.Is(err, context.Canceled) || errors.Is(err, racefree.ErrUnavailable) {
			t.Fatalf("an observe cancelled on the lock: %v, want context.Canceled alone (its transaction never committed)", err)
		}
		err = wait(func(ctx context.Context) error {
			return log.Record(ctx, db, "fp", 1, dedup.Result{Classification: "maybe"})
		})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, racefree.ErrUnavailable) {
			t.Fatalf("a record cancelled on the lock: %v, want context.Canceled and ErrUnavailable (an unknown outcome)", err)
		}
		if err := holder.Commit(); err != nil {
			t.Fatal(err)
		}
		if r, err := log.Get(ctx, db, "fp"); err != nil || r.Classification != "" && r.Classification != "maybe" {
			t.Fatalf("after the cancelled record: %+v, %v; want no result or the cancelled one's", r, err)
		}
		if o, err := log.Observe(ctx, db, ev, time.Minute); err != nil || o.Count != 4 {
			t.Fatalf("observe after the holder's commit: %+v, %v; want count 4 (the cancelled observe never counted)", o, err)
		}
		if err := log.Record(ctx, db, "fp", 1, dedup.Result{Classification: "settled"}); err != nil {
			t.Fatalf("the record again at the same fence: %v", err)
		}
		if r, err := log.Get(ctx, db, "fp"); err != nil || r.Classification != "settled" || r.ResultFence != 1 {
			t.Fatalf("after the record again: %+v, %v", r, err)
		}
	})
}

// TestEdgesUnknownOutcomeOfACallAlone loses the reply to the commit of
// an Observe and of a Record on the pool (testdb.CutReply), once
// PostgreSQL committed them: each returns racefree.ErrUnavailable and is
// never run again by itself; the occurrence counted once (the next
// observation counts 2, in the same window), and the result was recorded
// (recording again at the same fence settles it).
func TestEdgesUnknownOutcomeOfACallAlone(t *testing.T) {
	t.Parallel()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	direct := testdb.Open(t, dsn, nil)
	proxy, cut := testdb.NewCutReply(t, dsn)
	db := testdb.Open(t, cut, nil)
	log, reader := dedup.New(db), dedup.New(direct)
	ctx := context.Background()
	ev := dedup.Event{Source: "worker", Level: "error", Message: "failure", Fingerprint: "cut-observe"}
	proxy.LoseNextCommit("cut-observe")
	if _, err := log.Observe(ctx, db, ev, time.Minute); !errors.Is(err, racefree.ErrUnavailable) {
		t.Fatalf("an observe whose commit's reply was lost: %v, want ErrUnavailable", err)
	}
	proxy.Wait(t)
	o, err := reader.Observe(ctx, direct, ev, time.Minute)
	if err != nil || o.Count != 2 || o.Process || o.Fence != 1 {
		t.Fatalf("the next observation: %+v, %v; want count 2 in the lost observe's window (fence 1)", o, err)
	}
	proxy.LoseNextCommit("cut-record")
	if err := log.Record(ctx, db, "cut-observe", 1, dedup.Result{Classification: "cut-record"}); !errors.Is(err, racefree.ErrUnavailable) {
		t.Fatalf("a record whose commit's reply was lost: %v, want ErrUnavailable", err)
	}
	proxy.Wait(t)
	if r, err := reader.Get(ctx, direct, "cut-observe"); err != nil || r.Classification != "cut-record" || r.ResultFence != 1 {
		t.Fatalf("after the lost record: %+v, %v; want it recorded", r, err)
	}
	if err := log.Record(ctx, db, "cut-observe", 1, dedup.Result{Classification: "again"}); err != nil {
		t.Fatalf("the record again at the same fence: %v", err)
	}
}

// TestEdgesRecordOnAClaimWithoutAnEvent: a claim in dedup's namespace at
// the very fence Record is given, but no event row (a claim taken through
// the claim package alone), records nothing and is ErrNotFound, neither
// stale nor ahead: the fence equals the current one, so only the missing
// event can have refused it.
func TestEdgesRecordOnAClaimWithoutAnEvent(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, log *dedup.Log, clock *racefree.ManualClock, db *racefree.DB) {
		ctx := context.Background()
		c, err := claim.NewNamespace(db, dedup.Namespace).Acquire(ctx, db, "bare", "h", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		err = log.Record(ctx, db, "bare", c.Fence, dedup.Result{Classification: "x"})
		if !errors.Is(err, racefree.ErrNotFound) || errors.Is(err, racefree.ErrStaleFence) || errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("record at the claim's own fence with no event: %v, want ErrNotFound alone", err)
		}
		if _, err := log.Get(ctx, db, "bare"); !errors.Is(err, racefree.ErrNotFound) {
			t.Fatalf("event after the refused record: %v, want ErrNotFound", err)
		}
	})
}

// TestEdgesRecordReadsItsOwnTenantsFence: two tenants hold the same
// fingerprint at different fences (one was re-elected, the other not):
// each tenant's Record succeeds at its own current fence only, and the
// other tenant's fence is stale or ahead for it; each result lands on its
// own tenant's event. Record's fence check reads the claim of the tenant
// ctx names, never another tenant's row of the same namespace and key.
func TestEdgesRecordReadsItsOwnTenantsFence(t *testing.T) {
	t.Parallel()
	testdb.EachRole(t, t0, func(t *testing.T, db, _ *racefree.DB, clock *racefree.ManualClock) {
		log := dedup.New(db)
		// "aa" sorts before "zz": whichever tenant's row a read without
		// the tenant found first, one of the records below would fail.
		aa, zz := with(t, "aa"), with(t, "zz")
		ev := dedup.Event{Source: "s", Level: "l", Message: "m", Fingerprint: "fp"}
		if o, err := log.Observe(aa, db, ev, time.Minute); err != nil || o.Fence != 1 {
			t.Fatalf("aa's first window: %+v, %v", o, err)
		}
		clock.Advance(time.Minute) // aa's window lapses at this exact millisecond
		if o, err := log.Observe(aa, db, ev, time.Minute); err != nil || !o.Process || o.Fence != 2 {
			t.Fatalf("aa's second window: %+v, %v; want fence 2", o, err)
		}
		if o, err := log.Observe(zz, db, ev, time.Minute); err != nil || !o.Process || o.Fence != 1 {
			t.Fatalf("zz's first window: %+v, %v; want fence 1", o, err)
		}
		if err := log.Record(aa, db, "fp", 2, dedup.Result{Classification: "aa's"}); err != nil {
			t.Fatalf("aa records at its fence 2: %v", err)
		}
		if err := log.Record(zz, db, "fp", 1, dedup.Result{Classification: "zz's"}); err != nil {
			t.Fatalf("zz records at its fence 1: %v", err)
		}
		if err := log.Record(aa, db, "fp", 1, dedup.Result{Classification: "stale"}); !errors.Is(err, racefree.ErrStaleFence) {
			t.Fatalf("aa records at zz's fence 1: %v, want ErrStaleFence", err)
		}
		if err := log.Record(zz, db, "fp", 2, dedup.Result{Classification: "ahead"}); !errors.Is(err, racefree.ErrNotHeld) {
			t.Fatalf("zz records at aa's fence 2: %v, want ErrNotHeld", err)
		}
		for ctx, want := range map[context.Context]dedup.Record{
			aa: {Fingerprint: "fp", Source: "s", Level: "l", Message: "m", Result: dedup.Result{Classification: "aa's"}, ResultFence: 2},
			zz: {Fingerprint: "fp", Source: "s", Level: "l", Message: "m", Result: dedup.Result{Classification: "zz's"}, ResultFence: 1},
		} {
			if r, err := log.Get(ctx, db, "fp"); err != nil || *r != want {
				t.Fatalf("the event of %s: %+v, %v; want %+v", tenant.From(ctx), r, err, want)
			}
		}
	})
}
