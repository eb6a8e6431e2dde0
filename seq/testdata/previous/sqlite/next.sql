-- next: hand out the next n numbers of the (scope, name) counter in one
-- atomic statement, and return the last of them (the first is last - n + 1).
-- The first call creates the row at n; every later call conflicts on the
-- primary key and adds n to the stored value. SQLite runs the statement
-- under the database's write lock, held until the caller's transaction
-- ends (racefree begins every transaction IMMEDIATE), so no two callers
-- get the same number, and a rollback undoes the increment: nothing is
-- lost. The DO UPDATE WHERE refuses to pass the BIGINT maximum (no row
-- comes back, nothing changes), where SQLite would otherwise turn the sum
-- into a REAL.
-- ?1 scope, ?2 name, ?3 n
INSERT INTO racefree_sequences AS s (scope, name, last)
VALUES (?1, ?2, ?3)
ON CONFLICT (scope, name) DO UPDATE SET last = s.last + excluded.last
WHERE s.last <= 9223372036854775807 - excluded.last
RETURNING last
