package run

import (
	"context"
	"database/sql"
	"strings"

	"github.com/racefree/racefree"
)

// FreshStatistics runs ANALYZE on tables on PostgreSQL before a cell, as
// autovacuum's analyze does once a table changed by a tenth: a cell's
// rows can make a table many times larger than the last cell left it.
// PostgreSQL keeps a prepared statement's generic plan until the
// statistics of a table it reads change, however large the table grows
// meanwhile, and a statement over arrays planned while its table held a
// few hundred rows joins its arrays to a sequential scan of the whole
// table: on a server with autovacuum off the combiner's claim cells at 16
// clients ran at a fifth of their rate in three runs of six
// (docs/performance.md, "A plan made on a small table"). On SQLite it
// does nothing.
func FreshStatistics(ctx context.Context, db *racefree.DB, tables ...string) error {
	if db.Engine() != racefree.Postgres {
		return nil
	}
	_, err := db.ExecContext(ctx, "ANALYZE "+strings.Join(tables, ", "))
	return err
}

// AutovacuumNote says when the PostgreSQL server at url runs with
// autovacuum off: the bench's tables are then analyzed only by the
// bench, before each cell (FreshStatistics).
func AutovacuumNote(ctx context.Context, url string) (string, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var on string
	if err := db.QueryRowContext(ctx, "SHOW autovacuum").Scan(&on); err != nil {
		return "", err
	}
	if on == "on" {
		return "", nil
	}
	return "PostgreSQL's autovacuum is off on this server: the bench runs ANALYZE on its tables before each cell, as autovacuum's analyze would.", nil
}
