package audit

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestScopesPage reads the tenant's scopes a page at a time: in order,
// each scope once across the pages whatever the page size (a page of
// exactly the remaining scopes, then an empty one), only those that begin
// with the prefix (a scope one byte short of the prefix is not one), never
// another tenant's, and a limit below 1 is an InputError.
func TestScopesPage(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		l := newLog(t, db, ring(t, "k1"))
		for _, sc := range []string{"orders/3", "orders/1", "order", "orders/2", "payments"} {
			appendN(t, l, sc, 1)
		}
		other, _ := tenant.With(context.Background(), "globex")
		appendIn(other, t, l, "orders/0", 1)
		ctx := context.Background()
		for _, c := range []struct {
			prefix string
			limit  int
			want   []string
		}{
			{"", 2, []string{"order", "orders/1", "orders/2", "orders/3", "payments"}},
			{"orders/", 3, []string{"orders/1", "orders/2", "orders/3"}},
			{"orders/", 1, []string{"orders/1", "orders/2", "orders/3"}},
			{"orders/9", 1, nil},
		} {
			var got []string
			after := ""
			for pages := 0; ; pages++ {
				page, err := l.ScopesPage(ctx, c.prefix, after, c.limit)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > c.limit {
					t.Fatalf("prefix %q, limit %d: a page of %d", c.prefix, c.limit, len(page))
				}
				if len(page) == 0 || pages > 10 {
					break
				}
				got = append(got, page...)
				after = page[len(page)-1]
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("prefix %q, %d a page: %q, want %q", c.prefix, c.limit, got, c.want)
			}
		}
		if _, err := l.ScopesPage(ctx, "", "", 0); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Fatalf("a limit of 0: %v, want ErrInvalidInput", err)
		}
	})
}
