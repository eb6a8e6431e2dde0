-- quotas: the tenant's quota counters that still count something (a row
-- past expires_at means the same as no row), latest charged first, and
-- the clock. The row holds no policy (a policy travels with each charge),
-- so the page shows what the row knows: its kind, the units of the current
-- window and when it means nothing any more. Bounded by the limit.
-- ?1 tenant, ?2 clock, ?3 limit
WITH c(now) AS (SELECT COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)))
SELECT scope, key, kind, used, COALESCE(prev, 0), updated_at, expires_at, c.now
FROM racefree_quotas, c
WHERE tenant = ?1 AND expires_at > c.now
ORDER BY updated_at DESC
LIMIT ?3
