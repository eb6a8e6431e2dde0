-- reap: delete at most $3 rows of scope $1 in racefree_quotas whose expires_at is at or
-- before the cutoff $2 (computed once by the caller, a bound value that
-- lets the planner walk the (scope, expires_at) index in order and stop
-- after $3 rows). An expired row means the same as no row, so deleting it
-- changes no decision. The candidates are locked FOR UPDATE SKIP LOCKED:
-- a row that a charge holds is skipped, not waited for, so reapers and
-- writers never queue on each other. The outer WHERE repeats the expiry
-- test: at READ COMMITTED a DELETE that meets a row changed since its
-- snapshot re-checks only its own WHERE on the new version (invariant 10),
-- and a charge that moved expires_at forward must keep its row.
DELETE FROM racefree_quotas AS d
WHERE d.ctid = ANY (ARRAY(
        SELECT r.ctid FROM racefree_quotas AS r
        WHERE r.scope = $1 AND r.expires_at <= $2::bigint
        ORDER BY r.expires_at
        LIMIT $3
        FOR UPDATE SKIP LOCKED))
  AND d.expires_at <= $2::bigint
