-- begin: create the key's record as in progress, or restart one whose
-- retention lapsed. Only the holder of the key's lease runs it, so the
-- record's fingerprint and status change under the lease alone.
-- ?1 tenant, ?2 scope, ?3 key, ?4 fingerprint, ?5 retention ms, ?6 clock
INSERT INTO racefree_idempotency AS r (tenant, scope, key, fingerprint, status, created_at, expires_at)
SELECT ?1, ?2, ?3, ?4, 'in_progress', now, now + ?5
FROM (SELECT COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE true
ON CONFLICT (tenant, scope, key) DO UPDATE SET
  fingerprint = excluded.fingerprint, status = 'in_progress', response = NULL,
  created_at = excluded.created_at, completed_at = NULL, expires_at = excluded.expires_at
WHERE r.expires_at <= excluded.created_at
