-- step_get: a step's saved value, while live.
-- ?1 tenant, ?2 scope, ?3 key, ?4 step, ?5 clock
SELECT value FROM racefree_idempotency_steps
WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND step = ?4 AND expires_at > COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER))
