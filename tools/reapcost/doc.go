// Command reapcost measures what reaping claims costs on a large table, with
// the reaper as it is and with the reaper as it was before fence floors
// (a subquery with the volatile clock, batches back to back), so that the
// figures in docs/performance.md can be reproduced:
//
//	go run ./tools/reapcost -db sqlite:/tmp/reap.db -rows 1000000
//	go run ./tools/reapcost -db 'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&search_path=reapcost' -rows 1000000
//
// It fills namespace "" with rows, so point it at a scratch database: a
// SQLite file that does not exist yet, or on PostgreSQL a schema named by
// search_path, which it drops and creates.
package main
