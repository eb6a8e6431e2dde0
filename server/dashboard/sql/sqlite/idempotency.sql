-- idempotency: the tenant's requests whose Idempotency-Key is in progress
-- (begun, not completed), oldest first (scope and key breaking ties), and
-- the clock; only those of the filter's scope ('' for any) whose key
-- begins with the filter's ('' for any), and, past the first page, only
-- those after the sort key (created_at, scope, key) of the previous
-- page's last row. Bounded by the limit. Display only.
-- ?1 tenant, ?2 clock, ?3 limit, ?4 scope, ?5 key prefix,
-- ?6 after created_at (NULL: the first page), ?7 after scope, ?8 after key
WITH c(now) AS (SELECT COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)))
SELECT scope, key, created_at, c.now
FROM racefree_idempotency, c
WHERE tenant = ?1 AND status = 'in_progress'
  AND (?4 = '' OR scope = ?4) AND substr(key, 1, length(?5)) = ?5
  AND (?6 IS NULL OR (created_at, scope, key) > (?6, ?7, ?8))
ORDER BY created_at, scope, key
LIMIT ?3
