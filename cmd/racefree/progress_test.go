package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/uniquecheck"
)

// TestUniqueCheckProgress: --progress shows, in both modes, the check
// running, the rows of the total, the rate and the time left, on stderr
// only; --quiet and a stderr that is not a terminal show nothing.
func TestUniqueCheckProgress(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, dsn string) {
		db := testdb.Open(t, dsn, nil)
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, name TEXT)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO users VALUES (1, 'a', 'x'), (2, 'b', 'x'), (3, 'c', 'y'), (4, 'd', 'z')`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `ANALYZE users`); err != nil { // PostgreSQL's estimate
			t.Fatal(err)
		}
		migration := filepath.Join(t.TempDir(), "043.sql")
		write(t, migration, "CREATE UNIQUE INDEX users_email ON users (email);\nCREATE UNIQUE INDEX users_name ON users (name);\n")

		for _, mode := range [][]string{
			{"--table", "users", "--key", "email"},
			{"--migration", migration},
		} {
			args := append([]string{"--db", dsn}, mode...)
			checks := "1"
			if mode[0] == "--migration" {
				checks = "2"
			}
			r := runUniqueCheck(t, append(args, "--progress")...)
			if !strings.Contains(r.stderr, "check 1/"+checks+" ") || !strings.Contains(r.stderr, "users") || !strings.Contains(r.stderr, checks+" checks done: ") ||
				!strings.Contains(r.stderr, " rows/s, elapsed ") || !strings.Contains(r.stderr, ", ETA ") || strings.Contains(r.stdout, "rows/s") {
				t.Errorf("%v --progress: stderr %q, stdout %q; want the checks, rows, rate and ETA on stderr", mode, r.stderr, r.stdout)
			}
			want := regexp.MustCompile(`done: 4 of ~?4 rows`)
			if mode[0] == "--migration" {
				want = regexp.MustCompile(`done: 8 of ~?8 rows`)
			}
			if !want.MatchString(r.stderr) {
				t.Errorf("%v --progress: stderr %q; want %q at the end", mode, r.stderr, want)
			}
			for _, quiet := range [][]string{append(args, "--progress", "--quiet"), args} {
				if r := runUniqueCheck(t, quiet...); strings.Contains(r.stderr, "rows/s") || strings.Contains(r.stderr, "\r") {
					t.Errorf("%v: stderr %q; want no progress (quiet, or not a terminal)", quiet, r.stderr)
				}
			}
		}
	})
}

// TestScanProgressLine: the rate is that of the checks done, the time
// left is the rows left at that rate less the running check's time, and
// the line is redrawn at most once a second.
func TestScanProgressLine(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &scanProgress{w: &out, checks: 3, rows: []int64{1000, 1000, 2000}, now: func() time.Time { return now }}
	p.start = now
	p.begin(0, uniquecheck.Spec{Table: "users", Keys: []string{"email"}})
	if got := p.line(now); !strings.Contains(got, "check 1/3 users (email): 0 of ~4000 rows, ? rows/s") || !strings.HasSuffix(got, "ETA ?") {
		t.Errorf("before any check ended: %q", got)
	}
	now = now.Add(10 * time.Second)
	p.end(0)
	p.begin(1, uniquecheck.Spec{Table: "users", Keys: []string{"name"}})
	now = now.Add(5 * time.Second)
	// 1000 rows in 15s: 67 rows/s; 3000 rows left take 45s, 5s of them spent.
	if got := p.line(now); !strings.Contains(got, "check 2/3 users (name): 1000 of ~4000 rows, 67 rows/s, elapsed 15s, ETA 40s") {
		t.Errorf("after one check: %q", got)
	}
	p.draw(false)
	drawn := out.Len()
	p.draw(false)
	if out.Len() != drawn {
		t.Errorf("redrawn within a second of the last line")
	}
	now = now.Add(time.Second)
	p.draw(false)
	if out.Len() == drawn {
		t.Errorf("not redrawn a second later")
	}
}
