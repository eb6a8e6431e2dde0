package uniquecheck_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/uniquecheck"
)

// groupsText is a report's groups as "value count [primary keys]", the
// largest first, joined by "; ".
func groupsText(t *testing.T, rep *uniquecheck.Report) string {
	t.Helper()
	var parts []string
	for _, g := range rep.Groups {
		vals := make([]string, len(g.Values))
		for i, v := range g.Values {
			vals[i] = "NULL"
			if v != nil {
				vals[i] = *v
			}
		}
		keys := make([]string, len(g.PrimaryKeys))
		for j, k := range g.PrimaryKeys {
			var b bytes.Buffer
			if err := json.Compact(&b, k); err != nil {
				t.Fatal(err)
			}
			keys[j] = b.String()
		}
		parts = append(parts, fmt.Sprintf("%s %d %v", strings.Join(vals, ","), g.Count, keys))
	}
	return strings.Join(parts, "; ")
}

// TestEdgesCheckQuotesThePrimaryKey proves that a check names the primary
// key columns quoted when it reads a listed group's rows: a key column
// with a space in its name, a reserved word, or (PostgreSQL) capitals is
// read, and its values are the ones reported, single-column or
// composite, from the aggregate or from the second scan.
func TestEdgesCheckQuotesThePrimaryKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE lines ("Line No" INTEGER PRIMARY KEY, v TEXT)`)
		exec(t, db.SQL(), `INSERT INTO lines VALUES (5, 'x'), (2, 'x'), (9, 'x'), (4, 'y'), (1, 'y'), (3, 'z')`)
		exec(t, db.SQL(), `CREATE TABLE parts ("LineNo" INTEGER, "order" INTEGER, v TEXT, PRIMARY KEY ("LineNo", "order"))`)
		exec(t, db.SQL(), `INSERT INTO parts VALUES (2, 1, 'x'), (1, 7, 'x'), (1, 3, 'y')`)
		exec(t, db.SQL(), `CREATE TABLE "Mixed" ("LineNo" INTEGER PRIMARY KEY, v TEXT)`)
		exec(t, db.SQL(), `INSERT INTO "Mixed" VALUES (8, 'x'), (6, 'x'), (7, 'x'), (3, 'y'), (2, 'y')`)
		for _, c := range []struct {
			table, pk, want string
		}{
			{"lines", `["Line No"]`, "x 3 [2 5 9]; y 2 [1 4]"},
			{"parts", `["LineNo" "order"]`, "x 2 [[1,7] [2,1]]"},
			{`"Mixed"`, `["LineNo"]`, "x 3 [6 7 8]; y 2 [2 3]"},
		} {
			rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: c.table, Keys: []string{"v"}})
			if err != nil {
				t.Fatalf("%s: %v", c.table, err)
			}
			if pk := fmt.Sprintf("%q", rep.PrimaryKey); pk != c.pk {
				t.Errorf("%s: primary key %s, want %s", c.table, pk, c.pk)
			}
			if got := groupsText(t, rep); got != c.want {
				t.Errorf("%s: groups %s, want %s", c.table, got, c.want)
			}
		}
	})
}

// TestEdgesLimitAndMaxKeysAtZeroAndOne proves the bounds of a report at
// their edges: Limit 0 lists DefaultLimit groups and 1 the largest one,
// MaxKeys 0 lists DefaultMaxKeys primary keys and 1 the lowest one; the
// totals and counts always cover every group and row.
func TestEdgesLimitAndMaxKeysAtZeroAndOne(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		exec(t, db.SQL(), `CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER)`)
		// Group 0 has 12 rows; groups 1 to 21 have 2 each.
		for i := 0; i < 12; i++ {
			exec(t, db.SQL(), fmt.Sprintf(`INSERT INTO items VALUES (%d, 0)`, 100-i))
		}
		for g := 1; g <= uniquecheck.DefaultLimit+1; g++ {
			exec(t, db.SQL(), fmt.Sprintf(`INSERT INTO items VALUES (%d, %d), (%d, %d)`, 1000+2*g, g, 1001+2*g, g))
		}
		for _, c := range []struct {
			limit, maxKeys  int
			groups, keysTop int
		}{
			{0, 0, uniquecheck.DefaultLimit, uniquecheck.DefaultMaxKeys},
			{1, 0, 1, uniquecheck.DefaultMaxKeys},
			{0, 1, uniquecheck.DefaultLimit, 1},
			{1, 1, 1, 1},
		} {
			rep, err := uniquecheck.Check(context.Background(), db, uniquecheck.Spec{Table: "items", Keys: []string{"v"}, Limit: c.limit, MaxKeys: c.maxKeys})
			if err != nil {
				t.Fatal(err)
			}
			if rep.DuplicateGroups != int64(uniquecheck.DefaultLimit+2) || rep.SurplusRows != int64(11+uniquecheck.DefaultLimit+1) {
				t.Errorf("Limit %d, MaxKeys %d: %d groups, %d surplus; want %d, %d", c.limit, c.maxKeys,
					rep.DuplicateGroups, rep.SurplusRows, uniquecheck.DefaultLimit+2, 11+uniquecheck.DefaultLimit+1)
			}
			if len(rep.Groups) != c.groups {
				t.Fatalf("Limit %d: %d groups listed, want %d", c.limit, len(rep.Groups), c.groups)
			}
			top := rep.Groups[0]
			if *top.Values[0] != "0" || top.Count != 12 || len(top.PrimaryKeys) != c.keysTop || string(top.PrimaryKeys[0]) != "89" {
				t.Errorf("Limit %d, MaxKeys %d: largest group %s", c.limit, c.maxKeys, groupsText(t, &uniquecheck.Report{Groups: rep.Groups[:1]}))
			}
			if c.groups > 1 {
				if g := rep.Groups[1]; *g.Values[0] != "1" || g.Count != 2 || len(g.PrimaryKeys) != min(2, c.keysTop) {
					t.Errorf("Limit %d, MaxKeys %d: second group %s", c.limit, c.maxKeys, groupsText(t, &uniquecheck.Report{Groups: rep.Groups[1:2]}))
				}
			}
		}
	})
}

// TestEdgesCheckLeavesThePoolsConnectionWritable proves that a check on
// SQLite gives its connection back to the pool as it found it: out of
// its transaction, no longer query_only, so a write through the pool
// succeeds; and the same connection, kept, not closed and reopened (its
// TEMP table is still there).
func TestEdgesCheckLeavesThePoolsConnectionWritable(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "app.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	exec(t, db, `CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)`)
	exec(t, db, `INSERT INTO items VALUES (1, 'a'), (2, 'a')`)
	exec(t, db, `CREATE TEMP TABLE mark (x INTEGER)`)
	c, err := uniquecheck.New(racefree.SQLite, db)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		rep, err := c.Check(context.Background(), uniquecheck.Spec{Table: "items", Keys: []string{"v"}})
		if err != nil || rep.DuplicateGroups != 1 {
			t.Fatalf("check %d: %+v, %v", i, rep, err)
		}
		var on int
		if err := db.QueryRow(`PRAGMA query_only`).Scan(&on); err != nil || on != 0 {
			t.Fatalf("after check %d: query_only %d, %v; want 0", i, on, err)
		}
		exec(t, db, `INSERT INTO items (v) VALUES ('b')`)
		exec(t, db, `INSERT INTO mark VALUES (1)`) // fails if the pool's connection was replaced
		if st := db.Stats(); st.OpenConnections != 1 {
			t.Fatalf("after check %d: %d open connections, want 1", i, st.OpenConnections)
		}
	}
}
