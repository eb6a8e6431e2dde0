-- revoke: mark key $2 of tenant $1 revoked. A key revoked before keeps
-- the time of its first revocation, so revoking twice changes nothing.
-- $1 tenant, $2 id, $3 clock (NULL: the database clock)
UPDATE racefree_keys
   SET revoked_at = COALESCE(revoked_at, $3::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
 WHERE tenant = $1 AND id = $2
RETURNING scopes, name, created_at, revoked_at
