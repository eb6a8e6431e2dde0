// Package racefree makes the race-prone parts of backend data work correct by
// construction, with the database as the referee.
//
// A [DB] wraps one database — SQLite (embedded, the default) or PostgreSQL
// (shared by many stateless instances) — together with the clock every
// primitive reads and a transaction helper that retries the failures an
// engine reports when two writers collide. The primitives live in their own
// packages (claim, dedup, …) and take a *DB plus an [Executor], so that each
// guarantee can commit or roll back with the caller's own writes.
//
// Open a database with the engine package of your choice, which keeps the
// other engine's driver out of your binary:
//
//	db, err := sqlite.Open(ctx, "app.db", nil)          // racefree/sqlite
//	db, err := postgres.Open(ctx, "postgres://…", nil)  // racefree/postgres
//
// or by DSN with package dsn, which links both.
//
// Every guarantee is enforced by the database itself: a UNIQUE constraint, a
// single atomic statement whose rows-affected is checked, or a row lock.
// Nothing reads in Go, decides in Go and then writes.
package racefree
