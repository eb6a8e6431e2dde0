-- quotas: the tenant's quota counters that still count something (a row
-- past expires_at means the same as no row), latest charged first (scope,
-- key and kind breaking ties), and the clock; only those of the filter's
-- limiter scope (NULL for any, '' for the default limiter) whose key begins with the filter's ('' for
-- any), and, past the first page, only those after the sort key
-- (updated_at descending, scope, key, kind) of the previous page's last
-- row. The row holds no policy (a policy travels with each charge), so
-- the page shows what the row knows: its kind, the units of the current
-- window and when it means nothing any more. Bounded by the limit.
-- $1 tenant, $2 clock, $3 limit, $4 limiter scope (NULL: any), $5 key prefix,
-- $6 after updated_at (NULL: the first page), $7 after scope, $8 after key, $9 after kind
WITH c(now) AS (SELECT COALESCE($2::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint))
SELECT scope, key, kind, used, COALESCE(prev, 0), updated_at, expires_at, c.now
FROM racefree_quotas, c
WHERE tenant = $1 AND expires_at > c.now
  AND ($4::text IS NULL OR scope = $4::text) AND left(key, char_length($5::text)) = $5::text
  AND ($6::bigint IS NULL OR updated_at < $6::bigint
       OR (updated_at = $6::bigint AND (scope, key, kind) > ($7::text, $8::text, $9::text)))
ORDER BY updated_at DESC, scope, key, kind
LIMIT $3
