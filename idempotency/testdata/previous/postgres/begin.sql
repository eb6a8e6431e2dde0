-- begin: create the key's record as in progress, or restart one whose
-- retention lapsed. Only the holder of the key's lease runs it, so the
-- record's fingerprint and status change under the lease alone.
-- $1 scope, $2 key, $3 fingerprint, $4 retention ms, $5 clock
INSERT INTO racefree_idempotency AS r (scope, key, fingerprint, status, created_at, expires_at)
SELECT $1, $2, $3, 'in_progress', now, now + $4::bigint
FROM (SELECT COALESCE($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
WHERE true
ON CONFLICT (scope, key) DO UPDATE SET
  fingerprint = excluded.fingerprint, status = 'in_progress', response = NULL,
  created_at = excluded.created_at, completed_at = NULL, expires_at = excluded.expires_at
WHERE r.expires_at <= excluded.created_at
