package testdb_test

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestDatabaseOfItsOwnIsFresh: a database NewDatabaseDSN hands out is as
// fresh as a new one whatever its last holder left in it (schemas,
// tables, functions, settings, an event trigger), and the tests holding
// databases at the same time each hold another.
func TestDatabaseOfItsOwnIsFresh(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	held := map[string]string{} // database → the subtest holding it
	for round := range 2 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			for i := range 6 {
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					t.Parallel()
					dsn := testdb.NewDatabaseDSN(t)
					u, err := url.Parse(dsn)
					if err != nil {
						t.Fatal(err)
					}
					mu.Lock()
					if other, ok := held[u.Path]; ok {
						mu.Unlock()
						t.Fatalf("database %s handed to %s while %s holds it", u.Path, t.Name(), other)
					}
					held[u.Path] = t.Name()
					mu.Unlock()
					t.Cleanup(func() {
						mu.Lock()
						delete(held, u.Path)
						mu.Unlock()
					})
					db, err := sql.Open("pgx", dsn)
					if err != nil {
						t.Fatal(err)
					}
					defer db.Close()
					fresh(t, db, u.Path[1:])
					// Leave all of this for the next holder.
					for _, q := range []string{
						`CREATE TABLE t (n int)`,
						`CREATE SCHEMA other`,
						`CREATE TABLE other.t (n int)`,
						`CREATE FUNCTION other.f() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'`,
						`CREATE VIEW v AS SELECT * FROM t`,
						`GRANT CREATE ON SCHEMA public TO PUBLIC`,
						`ALTER DATABASE ` + u.Path[1:] + ` SET work_mem = '7MB'`,
						`CREATE FUNCTION public.noop() RETURNS event_trigger LANGUAGE plpgsql AS 'BEGIN END'`,
						fmt.Sprintf(`CREATE EVENT TRIGGER rf_testdb_%d ON ddl_command_end EXECUTE FUNCTION public.noop()`, i),
					} {
						if i%2 == 1 && strings.HasPrefix(q, "CREATE EVENT TRIGGER") {
							continue // half go back to the pool, half are made anew
						}
						if _, err := db.Exec(q); err != nil {
							t.Fatalf("%s: %v", q, err)
						}
					}
				})
			}
		})
	}
}

// fresh fails t unless the database name (db) is as a new copy of
// template0: public alone, empty and as template0 has it, no settings, no
// event trigger.
func fresh(t *testing.T, db *sql.DB, name string) {
	t.Helper()
	var schemas, objects, settings, triggers int
	var owner, acl string
	if err := db.QueryRow(`SELECT
  (SELECT count(*) FROM pg_namespace WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'),
  (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE nspname = 'public')
  + (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE nspname = 'public'),
  (SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = $1),
  (SELECT count(*) FROM pg_event_trigger),
  (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'public'),
  (SELECT nspacl::text FROM pg_namespace WHERE nspname = 'public')`, name).Scan(&schemas, &objects, &settings, &triggers, &owner, &acl); err != nil {
		t.Fatal(err)
	}
	if schemas != 1 || objects != 0 || settings != 0 || triggers != 0 ||
		owner != "pg_database_owner" || acl != "{pg_database_owner=UC/pg_database_owner,=U/pg_database_owner}" {
		t.Fatalf("database %s is not fresh: %d schemas, %d objects in public, %d settings, %d event triggers, public owned by %s with %s",
			name, schemas, objects, settings, triggers, owner, acl)
	}
}
