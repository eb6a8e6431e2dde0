// Package postgres is racefree's shared engine: many stateless racefree
// instances on one PostgreSQL database.
//
// Transactions run at READ COMMITTED. Time is the database's
// clock_timestamp(), read inside each statement, so that every instance
// agrees on it. Nothing relies on session state (no session SET, no session
// advisory lock), so every operation works through a transaction-mode pooler
// such as PgBouncer; with one, add default_query_exec_mode=exec to the URL.
//
// Importing this package links pgx only; a program that uses only SQLite
// imports racefree/sqlite instead.
package postgres
