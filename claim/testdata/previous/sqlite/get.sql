-- get: the claim's current state, and the clock it was read at.
-- ?1 ns, ?2 key, ?3 clock
SELECT holder, fence, claimed_at, expires_at, count, first_seen, last_seen, COALESCE(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now
FROM racefree_claims WHERE ns = ?1 AND key = ?2
