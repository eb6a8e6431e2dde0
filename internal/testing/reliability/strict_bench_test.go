package reliability

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/seq"
	"github.com/racefree/racefree/tenant"
)

// BenchmarkStrictMode measures what racefree.Config
// RequireSynchronousReplication costs a write, on a primary with a
// synchronous standby on loopback (testdb.NewCluster,
// synchronous_standby_names = '*'; fsync off): one claim acquire on the
// pool (one round trip: the tenant's statement pipelined with the
// acquire) and one sequence number in tenant.InTx (BEGIN, the tenant's
// statement, next, COMMIT), each by one client, as the application role
// (row-level security binds it) with pg_read_all_stats, strict and not.
// The difference is the check in the tenant's statement: two reads of
// settings and of pg_stat_replication.
func BenchmarkStrictMode(b *testing.B) {
	c := testdb.NewCluster(b)
	p := c.Primary.DB(b)
	owner := c.Primary.Open(b, nil)
	app := c.AppRole(b, owner)
	testdb.ExecAll(b, p, `GRANT pg_read_all_stats TO `+app, `ALTER ROLE `+app+` INHERIT`,
		`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`)
	waitRow(b, p, `SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'`)
	for _, strict := range []bool{false, true} {
		name := "plain"
		if strict {
			name = "strict"
		}
		db := testdb.Open(b, c.Primary.URLAs(app), &racefree.Config{RequireSynchronousReplication: strict, Schema: racefree.SchemaAllowOutdated})
		ctx := context.Background()
		b.Run("claim/"+name, func(b *testing.B) {
			s := claim.New(db)
			for i := 0; b.Loop(); i++ {
				if _, err := s.Acquire(ctx, db, name+strconv.Itoa(i), "h", time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("seq-in-tx/"+name, func(b *testing.B) {
			s := seq.New(db)
			for b.Loop() {
				err := tenant.InTx(ctx, db, tenant.Default, func(ctx context.Context, tx *sql.Tx) error {
					_, err := s.Next(ctx, tx, "bench", name)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
