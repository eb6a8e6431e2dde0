-- Delete at most $3 of tenant $1's expired events. $2 clock (NULL: engine
-- clock).
-- The cutoff is computed once, in a materialized CTE, so that it is one
-- stable value that the (tenant, expires_at) index can be probed with (a
-- bare clock_timestamp() is volatile and forces a sequential scan), and so
-- that both tests below compare with the same instant. The inner SELECT
-- picks the batch by the index, oldest first, and skips rows another
-- transaction has locked (a delivery still numbering its event), so that
-- concurrent reapers and writers never wait on each other. The DELETE
-- probes the picked rows by primary key, and repeats the expiry test in
-- its own WHERE: at READ COMMITTED that is the test PostgreSQL re-checks
-- on the latest row version (invariant 10).
WITH cutoff AS MATERIALIZED (
  SELECT COALESCE($2::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS ms
)
DELETE FROM racefree_inbox
WHERE tenant = $1 AND id = ANY (ARRAY(
  SELECT id FROM racefree_inbox
  WHERE tenant = $1 AND expires_at <= (SELECT ms FROM cutoff)
  ORDER BY expires_at
  LIMIT $3
  FOR UPDATE SKIP LOCKED
))
AND expires_at <= (SELECT ms FROM cutoff)
