-- complete: store the response and keep it for the retention period. The
-- caller has guarded the lease in the same transaction.
-- ?1 tenant, ?2 scope, ?3 key, ?4 response, ?5 retention ms, ?6 clock
UPDATE racefree_idempotency
SET status = 'completed', response = ?4, completed_at = clock.now, expires_at = clock.now + ?5
FROM (SELECT COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND status = 'in_progress'
