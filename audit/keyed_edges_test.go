package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/idempotency"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestEdgesAppendKeyedFieldsAtTheirSeams retries AppendKeyed with the same
// key and an entry whose fields join to the same bytes as the first's,
// one byte moved across each seam (actor into action, action into
// subject, subject into data) and the other way: each is another request,
// racefree.ErrMismatch, and appends nothing; the first entry retried as it
// was replays.
func TestEdgesAppendKeyedFieldsAtTheirSeams(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, keys := newLog(t, db, ring(t, "k1")), idempotency.New(db, nil)
		e := Entry{Actor: "ab", Action: "cd", Subject: "ef", Data: []byte("gh")}
		for i, other := range []Entry{
			{Actor: "a", Action: "bcd", Subject: "ef", Data: []byte("gh")},
			{Actor: "abc", Action: "d", Subject: "ef", Data: []byte("gh")},
			{Actor: "ab", Action: "c", Subject: "def", Data: []byte("gh")},
			{Actor: "ab", Action: "cde", Subject: "f", Data: []byte("gh")},
			{Actor: "ab", Action: "cd", Subject: "e", Data: []byte("fgh")},
			{Actor: "ab", Action: "cd", Subject: "efg", Data: []byte("h")},
		} {
			key := fmt.Sprintf("seam-%d", i)
			if _, replayed, err := l.AppendKeyed(ctx, db, keys, "s", e, key); err != nil || replayed {
				t.Fatalf("AppendKeyed(%s): replayed %v, %v", key, replayed, err)
			}
			if _, _, err := l.AppendKeyed(ctx, db, keys, "s", other, key); !errors.Is(err, racefree.ErrMismatch) {
				t.Errorf("the key of %+v with %+v: %v; want racefree.ErrMismatch", e, other, err)
			}
			if _, replayed, err := l.AppendKeyed(ctx, db, keys, "s", e, key); err != nil || !replayed {
				t.Errorf("AppendKeyed(%s) again: replayed %v, %v; want replayed", key, replayed, err)
			}
			if n, err := l.Length(ctx, "s"); err != nil || n != int64(i+1) {
				t.Fatalf("after seam %d: %d entries, %v; want %d", i, n, err, i+1)
			}
		}
	})
}

// TestEdgesPruneActorAtItsBound: Prune records its actor in the chain, so
// the actor holds Append's bound: one byte past MaxActorLen (two-byte
// characters and one more byte) is an InputError that prunes nothing and
// appends nothing; exactly MaxActorLen prunes, and its pruned entry
// carries that actor and verifies.
func TestEdgesPruneActorAtItsBound(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		ctx := context.Background()
		l := newLog(t, db, ring(t, "k1"))
		appendN(t, l, "s", 3)
		atBound := strings.Repeat("é", MaxActorLen/2)
		if len(atBound) != MaxActorLen {
			t.Fatalf("actor of %d bytes; want %d", len(atBound), MaxActorLen)
		}
		if _, err := l.Prune(ctx, db, "s", 2, atBound+"x"); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("Prune with an actor of %d bytes: %v; want an InputError", MaxActorLen+1, err)
		}
		if n, err := l.Length(ctx, "s"); err != nil || n != 3 {
			t.Fatalf("after the refused pruning: %d entries, %v; want 3, nothing pruned or appended", n, err)
		}
		p, err := l.Prune(ctx, db, "s", 2, atBound)
		if err != nil || p.Entry.Actor != atBound || p.Deleted != 2 {
			t.Fatalf("Prune with an actor of %d bytes: %+v, %v; want entries 1 and 2 pruned by it", MaxActorLen, p, err)
		}
		if got := entryRow(t, l, "s", p.Entry.Seq); got.Actor != atBound {
			t.Fatalf("the pruned entry's actor: %q; want %q", got.Actor, atBound)
		}
		wantIntact(t, verify(t, l, "s", &VerifyOptions{Checkpoints: []Checkpoint{p.Checkpoint}}))
	})
}
