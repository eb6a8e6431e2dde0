package doctor_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestPoolerPreparedStatements opens a database through PgBouncer in
// transaction mode: with pgx's default exec mode (cache_statement, which
// prepares statements per session) it is pooler-prepared-statements (an
// error); with default_query_exec_mode=exec, nothing about the pooler;
// directly, nothing either.
func TestPoolerPreparedStatements(t *testing.T) {
	t.Parallel()
	through := testdb.PgBouncer(t, 5) // with default_query_exec_mode=exec
	ctx := context.Background()
	exec, err := dsn.Open(ctx, through, &racefree.Config{Schema: racefree.SchemaMigrate})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Close()
	pooler := []string{doctor.PoolerPreparedStatements, doctor.PoolerNotJudged}
	none(t, check(t, exec, doctor.Options{}), pooler...)

	u, _ := url.Parse(through)
	q := u.Query()
	q.Del("default_query_exec_mode")
	u.RawQuery = q.Encode()
	prepared, err := dsn.Open(ctx, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer prepared.Close()
	want(t, check(t, prepared, doctor.Options{}), doctor.PoolerPreparedStatements, doctor.Error)

	direct := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
	none(t, check(t, direct, doctor.Options{}), pooler...)
}
