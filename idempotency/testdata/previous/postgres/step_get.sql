-- step_get: a step's saved value, while live.
-- $1 scope, $2 key, $3 step, $4 clock
SELECT value FROM racefree_idempotency_steps
WHERE scope = $1 AND key = $2 AND step = $3 AND expires_at > COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
