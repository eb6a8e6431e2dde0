package tenant_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/tenant"
)

// TestEdgesGrantRefusesARoleNameItCannotQuote holds the bounds of the
// role name Grant and CheckAppRole take: a role of 63 bytes, PostgreSQL's
// limit, is granted; a name of 64 bytes is an InputError and grants
// nothing, though PostgreSQL would read it as its first 63 and so grant
// that other role; a name holding DEL (0x7f) is an InputError and grants
// nothing, though PostgreSQL holds a role of that name.
func TestEdgesGrantRefusesARoleNameItCannotQuote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.NewDSN(t, racefree.Postgres)
	owner := testdb.Open(t, dsn, nil)
	admin := testdb.Open(t, dsn, nil) // the superuser, for roles
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	prefix := "rf_edge_" + hex.EncodeToString(b) + "_"
	long := prefix + strings.Repeat("r", 63-len(prefix))
	del := prefix + "a\x7fb"
	for _, role := range []string{long, del} {
		quoted := `"` + role + `"`
		if _, err := admin.ExecContext(ctx, `CREATE ROLE `+quoted+` NOLOGIN`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = admin.ExecContext(ctx, `DROP OWNED BY `+quoted)
			if _, err := admin.ExecContext(ctx, `DROP ROLE `+quoted); err != nil {
				t.Errorf("drop role: %v", err)
			}
		})
	}
	granted := func(role string) bool {
		t.Helper()
		var ok bool
		if err := owner.QueryRowContext(ctx, `SELECT has_table_privilege(oid, 'racefree_claims', 'SELECT') FROM pg_roles WHERE rolname = $1`, role).Scan(&ok); err != nil {
			t.Fatalf("privilege of %q: %v", role, err)
		}
		return ok
	}
	for _, role := range []string{long + "x", del} {
		if err := tenant.CheckAppRole(ctx, owner, role); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("CheckAppRole(%q) = %v, want an InputError", role, err)
		}
		if err := tenant.Grant(ctx, owner, role); !errors.Is(err, racefree.ErrInvalidInput) {
			t.Errorf("Grant(%q) = %v, want an InputError", role, err)
		}
	}
	if granted(long) || granted(del) {
		t.Fatalf("a refused name was granted: %q %v, %q %v", long, granted(long), del, granted(del))
	}
	if err := tenant.Grant(ctx, owner, long); err != nil {
		t.Fatalf("Grant(a role of 63 bytes) = %v", err)
	}
	if !granted(long) {
		t.Fatal("Grant(a role of 63 bytes) granted nothing")
	}
}
