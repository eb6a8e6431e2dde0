-- reap: delete up to $4 claims of the tenant's namespace ($1, $2) whose
-- expiry is at or before the cutoff $3 (now - grace, computed once per
-- batch by the caller: a bound value, unlike clock_timestamp(), lets the
-- planner walk the (tenant, ns, expires_at) index in order and stop after
-- $4 rows), and raise the namespace's fence floor to the highest fence
-- deleted, in this one statement, so that the deletion and the floor
-- commit together.
--
-- The candidates are locked FOR UPDATE SKIP LOCKED: a row that a caller's
-- open transaction is re-acquiring is skipped, not waited for. The outer
-- WHERE repeats the expiry test, because at READ COMMITTED a DELETE that
-- waited for a row re-checks only its own WHERE on the row's new version.
-- Rows are probed by ctid (a TID scan), so the plan stays the same at
-- every batch size; the outer WHERE leaves out tenant and ns (part of the
-- primary key, never updated: the candidates are the tenant's own) so
-- that the (tenant, ns, expires_at) index, which would walk every lapsed
-- row of the namespace, is no candidate for the outer scan.
--
-- NULLs: a row with a NULL expiry (written before migration 002) never
-- matches expires_at <= $3: it never lapsed, it is free to claim, and a
-- reap keeps it (a COALESCE that made it lapsed would delete it). It
-- returns the deleted keys.
-- $1 tenant, $2 ns, $3 cutoff ms, $4 batch size
WITH del AS (
  DELETE FROM racefree_claims AS c
  WHERE c.ctid = ANY (ARRAY(
          SELECT r.ctid FROM racefree_claims AS r
          WHERE r.tenant = $1 AND r.ns = $2 AND r.expires_at <= $3::bigint
          ORDER BY r.expires_at
          LIMIT $4
          FOR UPDATE SKIP LOCKED))
    AND c.expires_at <= $3::bigint
  RETURNING c.key, c.fence
), raised AS (
  INSERT INTO racefree_claim_floors AS f (tenant, ns, floor)
  SELECT $1, $2, max(del.fence) FROM del HAVING max(del.fence) IS NOT NULL
  ON CONFLICT (tenant, ns) DO UPDATE SET floor = GREATEST(f.floor, excluded.floor)
)
SELECT key FROM del
