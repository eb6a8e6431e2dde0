-- get: the key's live record.
-- ?1 scope, ?2 key, ?3 clock
SELECT fingerprint, status, response FROM racefree_idempotency
WHERE scope = ?1 AND key = ?2 AND expires_at > COALESCE(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER))
