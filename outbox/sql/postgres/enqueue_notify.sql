-- enqueue_notify: enqueue, and NOTIFY racefree_outbox with the tenant as
-- payload. PostgreSQL delivers the notification when the caller's
-- transaction commits, and never when it rolls back; the notifications of
-- one transaction with the same payload are folded into one. pg_notify
-- returns void, which IS NOT NULL: the WHERE only makes it run.
-- $1 tenant, $2 topic, $3 key, $4 ordered, $5 payload, $6 headers (JSON),
-- $7 delay ms, $8 max attempts, $9 clock (NULL: the database clock)
WITH clock AS MATERIALIZED (
  SELECT COALESCE($9::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
), ins AS (
  INSERT INTO racefree_outbox (tenant, topic, key, ordered, payload, headers, state, created_at, available_at,
                               attempts, max_attempts, fence, leased_by, last_error)
  SELECT $1, $2, $3, $4, $5, $6, 'ready', now, now + $7::bigint, 0, $8, 0, '', '' FROM clock
  RETURNING id
)
SELECT id FROM ins WHERE pg_notify('racefree_outbox', $1) IS NOT NULL
