// Package uniquecheck finds the rows that would make adding a UNIQUE index or
// constraint fail, with the index's own semantics, before the migration runs.
//
// Guarantee: Check reports duplicate groups exactly when CREATE UNIQUE INDEX
// on the same keys and predicate would fail on the same data. It groups the
// rows by the index's own key expressions (lower(email) is grouped by
// lower(email)), keeps only the rows the partial-index predicate covers, and
// drops every row with a NULL in any key, because NULLs are distinct in a
// unique index (unless Spec.NullsNotDistinct, PostgreSQL 15 and later).
// Grouping is done by the engine with its own equality: PostgreSQL's btree
// equality and collation, SQLite's storage classes, affinities and column
// collations, so 1 and '1' are one value in a TEXT column and two in an
// untyped one, on both sides. The tests prove the equivalence on both engines
// by building the index in a rolled-back transaction. With Spec.NotNull (a
// PRIMARY KEY, whose NOT NULL fails on any row with a NULL key) it also
// counts those rows, every row of the table whatever the predicate, in
// Report.NullRows; Report.Builds is false while either count is not zero.
//
// Cost: a check finds the duplicate groups with the bare aggregate, GROUP
// BY … HAVING count(*) > 1, the only step that reads every row; sorts only
// the groups it lists (Spec.Limit, largest first); and fetches the lowest
// Spec.MaxKeys primary keys of those groups in a second read of the table,
// which keeps only their rows (through an index on the keys if there is
// one). On PostgreSQL the hash aggregate also keeps the lowest and highest
// key of each group (a single-column primary key), which name both rows of
// a pair at almost no cost, so the second read happens only when a listed
// group has more than two rows or the key is composite. SQLite's GROUP BY
// sorts every row, and there those two aggregates cost more than the
// second read; its aggregate only counts, and computes an expression key
// once per row rather than twice (unless an index gives the keys' order).
// BenchmarkCheck compares a check with the bare aggregate; docs/performance.md has
// the figures.
//
// Safety: a check only reads. It runs in one read-only transaction
// (PostgreSQL BEGIN READ ONLY at REPEATABLE READ with SET LOCAL
// statement_timeout; SQLite a deferred transaction on a connection with
// PRAGMA query_only, and Open opens the file with mode=ro), bounded by
// Checker.Timeout (default 60 s). Table and column names go through one
// quoting function. Key expressions and predicates are the operator's own
// SQL: they are refused if they contain ';' or a block comment, the engine
// prepares each one before the scan, and they run only inside that
// transaction.
//
// Failure modes: an unknown table, an invalid name or expression, and
// NullsNotDistinct on SQLite or PostgreSQL before 15 are *racefree.InputError
// (errors.Is racefree.ErrInvalidInput); an expression the engine rejects and
// a timeout are returned as the engine's error. The check sees the data as it
// is now: rows written after it ran, and statements earlier in the migration
// that rewrite the key columns (FromMigration warns about those), can still
// make the migration fail.
//
// FromMigration reads the unique indexes and constraints out of a migration
// file with PostgreSQL's own parser (libpg_query, compiled to WebAssembly and
// run in pure Go), and DedupeSQL prints, but never runs, SQL that archives
// the surplus rows and deletes them.
package uniquecheck
