-- complete: store the response and keep it for the retention period. The
-- caller has guarded the lease in the same transaction.
-- ?1 scope, ?2 key, ?3 response, ?4 retention ms, ?5 clock
UPDATE racefree_idempotency
SET status = 'completed', response = ?3, completed_at = clock.now, expires_at = clock.now + ?4
FROM (SELECT COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE scope = ?1 AND key = ?2 AND status = 'in_progress'
