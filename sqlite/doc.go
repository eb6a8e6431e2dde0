// Package sqlite is racefree's embedded engine: one database file, no server.
//
// Every connection runs in WAL mode with synchronous=NORMAL, foreign keys on
// and a busy timeout, and every transaction begins IMMEDIATE so that it takes
// the write lock before its first read. Time is the process clock, which is
// the only clock: SQLite runs in-process. While a DB is open, a keeper has
// the write-ahead log start over once it passes WALLimit, which SQLite
// alone never does while some connection reads it (see WALLimit).
//
// Importing this package links the pure-Go SQLite driver (modernc.org/sqlite);
// a program that uses only PostgreSQL imports racefree/postgres instead.
package sqlite
