-- get: the key's live record.
-- $1 tenant, $2 scope, $3 key, $4 clock
SELECT fingerprint, status, response FROM racefree_idempotency
WHERE tenant = $1 AND scope = $2 AND key = $3 AND expires_at > COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
