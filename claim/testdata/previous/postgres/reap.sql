-- reap: delete up to $3 claims of namespace $1 whose expiry is at or before
-- the cutoff $2 (now - grace, computed once per batch by the caller: a
-- bound value, unlike clock_timestamp(), lets the planner walk the
-- (ns, expires_at) index in order and stop after $3 rows), and raise the
-- namespace's fence floor to the highest fence deleted, in this one
-- statement, so that the deletion and the floor commit together.
--
-- The candidates are locked FOR UPDATE SKIP LOCKED: a row that a caller's
-- open transaction is re-acquiring is skipped, not waited for. The outer
-- WHERE repeats the expiry test, because at READ COMMITTED a DELETE that
-- waited for a row re-checks only its own WHERE on the row's new version.
-- Rows are probed by ctid (a TID scan), so the plan stays the same at
-- every batch size; the outer WHERE leaves out ns (part of the primary
-- key, never updated) so that the (ns, expires_at) index, which would walk
-- every lapsed row of the namespace, is no candidate for the outer scan.
-- Rows with a NULL expiry (compatible mode) never match. It returns the
-- deleted keys.
-- $1 ns, $2 cutoff ms, $3 batch size
WITH del AS (
  DELETE FROM racefree_claims AS c
  WHERE c.ctid = ANY (ARRAY(
          SELECT r.ctid FROM racefree_claims AS r
          WHERE r.ns = $1 AND r.expires_at <= $2::bigint
          ORDER BY r.expires_at
          LIMIT $3
          FOR UPDATE SKIP LOCKED))
    AND c.expires_at <= $2::bigint
  RETURNING c.key, c.fence
), raised AS (
  INSERT INTO racefree_claim_floors AS f (ns, floor)
  SELECT $1, max(del.fence) FROM del HAVING max(del.fence) IS NOT NULL
  ON CONFLICT (ns) DO UPDATE SET floor = GREATEST(f.floor, excluded.floor)
)
SELECT key FROM del
