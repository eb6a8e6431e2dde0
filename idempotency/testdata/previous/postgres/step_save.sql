-- step_save: keep the first saved value of a step; a live value is never
-- replaced. The caller has guarded the lease in the same transaction.
-- $1 scope, $2 key, $3 step, $4 value, $5 fence, $6 retention ms, $7 clock
INSERT INTO racefree_idempotency_steps AS s (scope, key, step, value, fence, expires_at)
SELECT $1, $2, $3, $4, $5, now + $6::bigint
FROM (SELECT COALESCE($7::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
WHERE true
ON CONFLICT (scope, key, step) DO UPDATE SET value = excluded.value, fence = excluded.fence, expires_at = excluded.expires_at
WHERE s.expires_at <= excluded.expires_at - $6::bigint
