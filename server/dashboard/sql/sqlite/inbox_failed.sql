-- inbox_failed: the tenant's latest deliveries that failed permanently
-- (inbox.Permanent: acknowledged, never retried), the inbox's dead
-- letters, newest first. Bounded by the limit.
-- ?1 tenant, ?2 limit
SELECT source, event_id, COALESCE(seq, 0), COALESCE(reason, ''), received_at
FROM racefree_inbox
WHERE tenant = ?1 AND status = 'failed'
ORDER BY id DESC
LIMIT ?2
