-- reap_families: delete up to a batch of the tenant's refresh-token
-- families whose live token expired at least grace ago, with the tokens
-- they retired, in one statement. No token of such a family can rotate
-- any more, so reuse detection has nothing left to protect; a token
-- presented afterwards is Unknown. A family that a concurrent rotation
-- holds locked is skipped, and the expiry test is repeated in the
-- DELETE's own WHERE (a rotation moves head_expires_at forward).
-- $1 tenant, $2 grace ms, $3 batch, $4 clock
WITH clock AS (
  SELECT COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
), gone AS (
  DELETE FROM racefree_refresh_families AS f
  USING clock
  WHERE f.tenant = $1 AND f.head_expires_at <= clock.now - $2::bigint
    AND f.family IN (
      SELECT o.family FROM racefree_refresh_families AS o, clock
      WHERE o.tenant = $1 AND o.head_expires_at <= clock.now - $2::bigint
      ORDER BY o.head_expires_at LIMIT $3
      FOR UPDATE OF o SKIP LOCKED)
  RETURNING f.family
), retired AS (
  DELETE FROM racefree_refresh_retired AS r
  WHERE r.tenant = $1 AND r.family IN (SELECT family FROM gone)
)
SELECT count(*) FROM gone
