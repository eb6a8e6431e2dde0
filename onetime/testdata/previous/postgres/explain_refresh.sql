-- explain_refresh: read why rotate and reuse matched no row: the token is
-- the head of a revoked or expired family, a retired token of a revoked
-- family, or unknown. It only explains; it never decides.
-- $1 tenant, $2 hash, $3 clock
SELECT f.head = $2, f.revoked_at IS NOT NULL, f.head_expires_at,
  COALESCE($3::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
FROM racefree_refresh_families AS f
WHERE f.tenant = $1 AND (f.head = $2 OR f.family = (
  SELECT r.family FROM racefree_refresh_retired AS r WHERE r.tenant = $1 AND r.hash = $2))
