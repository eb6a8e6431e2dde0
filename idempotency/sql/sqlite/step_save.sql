-- step_save: keep the first saved value of a step; a live value is never
-- replaced. The caller has guarded the lease in the same transaction.
-- ?1 tenant, ?2 scope, ?3 key, ?4 step, ?5 value, ?6 fence, ?7 retention ms, ?8 clock
INSERT INTO racefree_idempotency_steps AS s (tenant, scope, key, step, value, fence, expires_at)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, now + ?7
FROM (SELECT COALESCE(?8, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE true
ON CONFLICT (tenant, scope, key, step) DO UPDATE SET value = excluded.value, fence = excluded.fence, expires_at = excluded.expires_at
WHERE s.expires_at <= excluded.expires_at - ?7
