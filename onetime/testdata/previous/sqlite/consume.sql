-- consume: redeem a one-time code, in this one conditional UPDATE. The
-- WHERE is the whole decision: the code of this purpose, not yet used
-- (used_at IS NULL), not revoked, and live (now < expires_at: expired from
-- the exact millisecond expires_at). SQLite runs one writer at a time, so
-- of concurrent redemptions the first sets used_at and the others match
-- nothing. The caller redeemed the code if and only if a row comes back.
-- ?1 tenant, ?2 hash, ?3 purpose, ?4 clock (NULL: the process clock)
UPDATE racefree_onetime_codes AS c SET used_at = clock.now
FROM (SELECT COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE c.tenant = ?1 AND c.hash = ?2 AND c.purpose = ?3
  AND c.used_at IS NULL AND c.revoked_at IS NULL AND clock.now < c.expires_at
RETURNING subject, issued_at, expires_at, used_at
