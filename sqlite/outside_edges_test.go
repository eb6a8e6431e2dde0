package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/wire"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// edgesDB opens a migrated racefree.DB on a fresh file.
func edgesDB(t *testing.T, cfg *racefree.Config) (*racefree.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edges.db")
	c := racefree.Config{Schema: racefree.SchemaMigrate}
	if cfg != nil {
		c = *cfg
		c.Schema = racefree.SchemaMigrate
	}
	db, err := Open(context.Background(), path, &c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, path
}

// sqliteCode returns the extended result code of a SQLite error, or -1.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return -1
	}
	return se.Code()
}

// TestEdgesBusyAndLockedAreRetryableWhateverTheirExtendedCode holds the
// edge of SQLite's extended result codes, which the driver reports: a
// transaction whose read snapshot another writer overtook fails its
// first write with SQLITE_BUSY_SNAPSHOT (517), at once, whatever the busy
// timeout, and a table another statement of the connection reads is
// SQLITE_LOCKED; both are ErrRetryable, as SQLITE_BUSY is, so that InTx
// runs the transaction again.
func TestEdgesBusyAndLockedAreRetryableWhateverTheirExtendedCode(t *testing.T) {
	t.Parallel()
	db, _ := edgesDB(t, nil)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (k INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	c, err := db.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `BEGIN DEFERRED`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil { // the snapshot
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO t VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	_, err = c.ExecContext(ctx, `INSERT INTO t VALUES (3)`)
	if _, rerr := c.ExecContext(ctx, `ROLLBACK`); rerr != nil {
		t.Fatal(rerr)
	}
	if code := sqliteCode(err); code != sqlite3.SQLITE_BUSY_SNAPSHOT {
		t.Fatalf("a write on an overtaken snapshot: %v (code %d); the test needs SQLITE_BUSY_SNAPSHOT", err, code)
	}
	if got := wire.Of(db).InterpretError(err); !errors.Is(got, racefree.ErrRetryable) {
		t.Errorf("SQLITE_BUSY_SNAPSHOT: %v, want ErrRetryable", got)
	}

	rows, err := c.QueryContext(ctx, `SELECT k FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatal("no row")
	}
	_, err = c.ExecContext(ctx, `DROP TABLE t`)
	_ = rows.Close()
	if code := sqliteCode(err); code&0xff != sqlite3.SQLITE_LOCKED {
		t.Fatalf("DROP TABLE under a read of the same connection: %v (code %d); the test needs SQLITE_LOCKED", err, code)
	}
	if got := wire.Of(db).InterpretError(err); !errors.Is(got, racefree.ErrRetryable) {
		t.Errorf("SQLITE_LOCKED: %v, want ErrRetryable", got)
	}
}

// TestEdgesOnlyAKeyViolationIsAConflict holds the edges of the
// constraint codes: a UNIQUE violation, and a PRIMARY KEY one (a
// composite key, a WITHOUT ROWID table, an INTEGER PRIMARY KEY), are
// ErrConflict, as 23505 is on PostgreSQL; a CHECK, a NOT NULL, a foreign
// key and a trigger's RAISE(ABORT) (the audit log's refusals) are
// constraint errors too, and none of them is ErrConflict.
func TestEdgesOnlyAKeyViolationIsAConflict(t *testing.T) {
	t.Parallel()
	db, _ := edgesDB(t, nil)
	ctx := context.Background()
	for _, s := range []string{
		`CREATE TABLE pk (a TEXT, b TEXT, PRIMARY KEY (a, b))`,
		`CREATE TABLE wr (a TEXT PRIMARY KEY) WITHOUT ROWID`,
		`CREATE TABLE ip (k INTEGER PRIMARY KEY)`,
		`CREATE TABLE u (x TEXT UNIQUE)`,
		`CREATE TABLE ck (n INTEGER CHECK (n > 0), s TEXT NOT NULL DEFAULT '', r INTEGER REFERENCES ip (k))`,
		`CREATE TRIGGER ck_refuse BEFORE DELETE ON ck BEGIN SELECT RAISE(ABORT, 'refused'); END`,
		`INSERT INTO pk VALUES ('a', 'b')`, `INSERT INTO wr VALUES ('a')`, `INSERT INTO ip VALUES (1)`,
		`INSERT INTO u VALUES ('x')`, `INSERT INTO ck (n, r) VALUES (1, 1)`,
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	for _, c := range []struct {
		stmt     string
		code     int
		conflict bool
	}{
		{`INSERT INTO pk VALUES ('a', 'b')`, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, true},
		{`INSERT INTO wr VALUES ('a')`, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, true},
		{`INSERT INTO ip VALUES (1)`, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, true},
		{`INSERT INTO u VALUES ('x')`, sqlite3.SQLITE_CONSTRAINT_UNIQUE, true},
		{`INSERT INTO ck (n) VALUES (0)`, sqlite3.SQLITE_CONSTRAINT_CHECK, false},
		{`INSERT INTO ck (n, s) VALUES (1, NULL)`, sqlite3.SQLITE_CONSTRAINT_NOTNULL, false},
		{`INSERT INTO ck (n, r) VALUES (1, 2)`, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY, false},
		{`DELETE FROM ck`, sqlite3.SQLITE_CONSTRAINT_TRIGGER, false},
	} {
		_, err := db.ExecContext(ctx, c.stmt)
		if code := sqliteCode(err); code != c.code {
			t.Errorf("%s: %v (code %d); the test needs code %d", c.stmt, err, code, c.code)
			continue
		}
		if got := wire.Of(db).InterpretError(err); errors.Is(got, racefree.ErrConflict) != c.conflict {
			t.Errorf("%s: %v; ErrConflict %v, want %v", c.stmt, got, !c.conflict, c.conflict)
		}
	}
}

// TestEdgesWALKeeperBacksOffAfreshAfterARestart holds the edge between
// two long readers: once the log started over, the keeper's wait after
// its next failed try starts again from twice its period, not from the
// wait the reader before built up (which, doubled, reaches 10 s while
// the log grows).
func TestEdgesWALKeeperBacksOffAfreshAfterARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, e, wal := openWAL(t)
	const every = 5 * time.Millisecond // openWAL's period
	blob := []byte(strings.Repeat("x", 2048))
	k := 0
	write := func() {
		t.Helper()
		if _, err := db.ExecContext(ctx, "INSERT INTO t (k, v) VALUES (?, ?)", k, blob); err != nil {
			t.Fatal(err)
		}
		k++
	}
	hold := func() *sql.Tx {
		t.Helper()
		tx, err := db.SQL().BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil { // a snapshot on the log
			t.Fatal(err)
		}
		return tx
	}
	write()
	first := hold()
	defer first.Rollback()
	for walSize(t, wal) <= walTestLimit {
		write()
	}
	waitFor(t, "the keeper's backoff under the first reader", func() bool { return e.wal.backoff.Load() >= int64(4*every) })
	if err := first.Rollback(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the log started over once the first reader ended", func() bool {
		write()
		return e.wal.restarts.Load() > 0 && walSize(t, wal) <= walTestLimit
	})
	// The log's file is at most its limit: the keeper only looks.
	e.wal.backoff.Store(0)
	second := hold()
	defer second.Rollback()
	for walSize(t, wal) <= walTestLimit {
		write()
	}
	waitFor(t, "the keeper's first failed try under the second reader", func() bool { return e.wal.backoff.Load() != 0 })
	if got := time.Duration(e.wal.backoff.Load()); got != 2*every {
		t.Fatalf("the keeper's first wait under a new reader, after the log started over: %v; want %v, twice its period", got, 2*every)
	}
}
