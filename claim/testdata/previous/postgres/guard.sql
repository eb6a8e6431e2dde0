-- guard: succeed (one row) only while (holder, fence) holds a live claim.
-- On PostgreSQL the row is locked FOR SHARE until the caller's transaction
-- ends, so no takeover can commit in between; on SQLite the caller's
-- IMMEDIATE transaction already excludes every other writer.
-- $1 ns, $2 key, $3 holder, $4 fence, $5 clock
SELECT 1 FROM racefree_claims AS c
WHERE c.ns = $1 AND c.key = $2 AND c.holder = $3 AND c.fence = $4
  AND c.expires_at > COALESCE($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
FOR SHARE OF c
