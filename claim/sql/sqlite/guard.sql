-- guard: succeed (one row) only while (holder, fence) holds a live claim.
-- On PostgreSQL the row is locked FOR SHARE until the caller's transaction
-- ends, so no takeover can commit in between; on SQLite the caller's
-- IMMEDIATE transaction already excludes every other writer.
--
-- NULLs: a row written before migration 002 has a NULL fence and expiry,
-- and c.fence = ?5 is then not true: no (holder, fence) holds it, which is
-- what IS would say too, since ?5 is never NULL (a fence below 1 is
-- refused before the query).
-- ?1 tenant, ?2 ns, ?3 key, ?4 holder, ?5 fence, ?6 clock
SELECT 1 FROM racefree_claims AS c
WHERE c.tenant = ?1 AND c.ns = ?2 AND c.key = ?3 AND c.holder = ?4 AND c.fence = ?5
  AND c.expires_at > COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER))
