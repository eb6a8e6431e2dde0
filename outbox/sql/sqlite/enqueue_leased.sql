-- enqueue_leased: insert a message already leased to worker ?8 (fence 1,
-- attempt 1, returned) until now + ?9 ms, in the caller's transaction: the
-- ancillary step runs it right after the commit, and if that process dies
-- first the lease lapses and a relay delivers it.
-- ?1 tenant, ?2 topic, ?3 key, ?4 ordered, ?5 payload, ?6 headers (JSON),
-- ?7 max attempts, ?8 worker, ?9 lease ms, ?10 clock
INSERT INTO racefree_outbox (tenant, topic, key, ordered, payload, headers, state, created_at, available_at,
                             attempts, max_attempts, fence, leased_by, last_error)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, 'leased', now, now + ?9, 1, ?7, 1, ?8, ''
  FROM (SELECT COALESCE(?10, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now)
RETURNING id, created_at, available_at, fence
