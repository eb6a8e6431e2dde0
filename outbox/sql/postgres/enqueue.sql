-- enqueue: insert one ready message, in the caller's transaction. It is
-- due delay ms after the database clock, never at a time the caller's
-- clock chose.
-- $1 tenant, $2 topic, $3 key, $4 ordered, $5 payload, $6 headers (JSON),
-- $7 delay ms, $8 max attempts, $9 clock (NULL: the database clock)
WITH clock AS MATERIALIZED (
  SELECT COALESCE($9::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
)
INSERT INTO racefree_outbox (tenant, topic, key, ordered, payload, headers, state, created_at, available_at,
                             attempts, max_attempts, fence, leased_by, last_error)
SELECT $1, $2, $3, $4, $5, $6, 'ready', now, now + $7::bigint, 0, $8, 0, '', '' FROM clock
RETURNING id
