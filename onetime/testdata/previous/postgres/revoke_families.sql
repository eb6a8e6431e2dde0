-- revoke_families: revoke every family of subject ("sign out everywhere").
-- Rotate's WHERE refuses every token of a revoked family.
-- $1 tenant, $2 subject, $3 clock
UPDATE racefree_refresh_families AS f SET revoked_at = clock.now
FROM (SELECT COALESCE($3::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
WHERE f.tenant = $1 AND f.subject = $2 AND f.revoked_at IS NULL
