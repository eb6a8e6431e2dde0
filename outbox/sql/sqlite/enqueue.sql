-- enqueue: insert one ready message, in the caller's transaction (which
-- holds SQLite's write lock until it ends, so ids are in commit order). It
-- is due delay ms after the process clock read here.
-- ?1 tenant, ?2 topic, ?3 key, ?4 ordered, ?5 payload, ?6 headers (JSON),
-- ?7 delay ms, ?8 max attempts, ?9 clock (NULL: the process clock)
INSERT INTO racefree_outbox (tenant, topic, key, ordered, payload, headers, state, created_at, available_at,
                             attempts, max_attempts, fence, leased_by, last_error)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, 'ready', now, now + ?7, 0, ?8, 0, '', ''
  FROM (SELECT COALESCE(?9, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now)
RETURNING id
