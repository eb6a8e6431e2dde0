-- enqueue_leased: insert a message already leased to worker $8 (attempt
-- 1, fence returned) until now + $9 ms, in the caller's transaction: the
-- ancillary step runs it right after the commit, and if that process dies
-- first the lease lapses and a relay delivers it. The fence is the
-- timeline's floor, (timeline - 1) * 2^40 + 1 (1 on timeline 1; claim.sql
-- says why): a message id handed out again after a failover that lost the
-- first one never carries the lost lease's tenure.
-- $1 tenant, $2 topic, $3 key, $4 ordered, $5 payload, $6 headers (JSON),
-- $7 max attempts, $8 worker, $9 lease ms, $10 clock
WITH clock AS MATERIALIZED (
  SELECT COALESCE($10::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now,
    ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40) + 1 AS tl_floor
)
INSERT INTO racefree_outbox (tenant, topic, key, ordered, payload, headers, state, created_at, available_at,
                             attempts, max_attempts, fence, leased_by, last_error)
SELECT $1, $2, $3, $4, $5, $6, 'leased', now, now + $9::bigint, 1, $7, tl_floor, $8, '' FROM clock
RETURNING id, created_at, available_at, fence
