-- reap_ledger: delete at most $4 rows of ($1 tenant, $2 scope) in
-- racefree_quota_ledger whose expires_at is at or before the cutoff $3
-- (computed once by the caller, a bound value that lets the planner walk
-- the (tenant, expires_at) index in order and stop after $4 rows). An
-- expired row means the same as no row, so deleting it changes no
-- decision. The candidates are locked FOR UPDATE SKIP LOCKED: a row that a
-- charge holds is skipped, not waited for, so reapers and writers never
-- queue on each other. The outer WHERE repeats the tenant and the expiry
-- test: at READ COMMITTED a DELETE that meets a row changed since its
-- snapshot re-checks only its own WHERE on the new version (invariant 10).
DELETE FROM racefree_quota_ledger AS d
WHERE d.ctid = ANY (ARRAY(
        SELECT r.ctid FROM racefree_quota_ledger AS r
        WHERE r.tenant = $1 AND r.scope = $2 AND r.expires_at <= $3::bigint
        ORDER BY r.expires_at
        LIMIT $4
        FOR UPDATE SKIP LOCKED))
  AND d.tenant = $1 AND d.expires_at <= $3::bigint
