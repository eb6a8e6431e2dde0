-- next: hand out the next n numbers of the (scope, name) counter in one
-- atomic statement, and return the last of them (the first is last - n + 1).
-- The first call creates the row at n; every later call conflicts on the
-- primary key and adds n to the stored value. SQLite runs the statement
-- under the database's write lock, held until the caller's transaction
-- ends (racefree begins every transaction IMMEDIATE), so no two callers
-- get the same number and a rollback undoes the increment: nothing is
-- lost. The DO UPDATE WHERE refuses to pass the BIGINT maximum (no row
-- comes back), where SQLite would otherwise turn the sum into a REAL.
-- WHERE true lets SQLite parse ON CONFLICT after INSERT … SELECT.
-- ?1 scope, ?2 name, ?3 n, ?4 clock (NULL: the process clock)
INSERT INTO racefree_sequences AS s (scope, name, last, created_at, updated_at)
SELECT ?1, ?2, ?3, now, now
FROM (SELECT COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE true
ON CONFLICT (scope, name) DO UPDATE SET
  last       = s.last + excluded.last,
  updated_at = excluded.updated_at
WHERE s.last <= 9223372036854775807 - excluded.last
RETURNING last
