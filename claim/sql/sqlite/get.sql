-- get: the claim's current state in the tenant, and the clock it was read at.
-- ?1 tenant, ?2 ns, ?3 key, ?4 clock
SELECT holder, fence, claimed_at, expires_at, count, first_seen, last_seen, COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now
FROM racefree_claims WHERE tenant = ?1 AND ns = ?2 AND key = ?3
