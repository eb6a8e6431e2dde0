package audit

import (
	"context"
	"errors"
	"fmt"
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
