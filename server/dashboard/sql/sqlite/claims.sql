-- claims: the tenant's live application claims (namespace ''), soonest to
-- lapse first, and the clock they were read at. Bounded by the limit; the
-- (tenant, ns, expires_at) index serves the order, so a page load costs
-- what it shows, not the table. Display only: nothing is decided on it.
-- ?1 tenant, ?2 clock, ?3 limit
WITH c(now) AS (SELECT COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)))
SELECT key, holder, fence, expires_at, c.now
FROM racefree_claims, c
WHERE tenant = ?1 AND ns = '' AND expires_at > c.now
ORDER BY expires_at
LIMIT ?3
