-- acquire: take the claim on (ns, key) for holder until now + ttl, in one
-- atomic statement. Every attempt counts (count, last_seen). The holder,
-- fence and expiry change only when the claim is free: never claimed by the
-- lease logic (expires_at IS NULL: legacy rows, rows written before
-- migration 002) or lapsed (expires_at <= now; live while now < expires_at).
-- A new tenure on an existing row increments the fence by exactly one. The
-- live holder re-acquiring extends its own claim and keeps the fence. The
-- caller won when the returned holder is its own.
--
-- A key with no row starts one above the namespace's floor, the highest
-- fence the reaper deleted there (it raises the floor in the transaction
-- that deletes the rows), so a fence never goes backwards after a reap.
-- The row's own fence is read too, as on PostgreSQL; SQLite's single
-- writer makes it redundant. A legacy row (NULL fence) continues from the
-- same value.
-- ?1 ns, ?2 key, ?3 holder, ?4 ttl ms, ?5 clock (NULL: the process clock)
INSERT INTO racefree_claims AS c (ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
SELECT ?1, ?2, ?3,
  1 + MAX(
    COALESCE((SELECT r.fence FROM racefree_claims AS r WHERE r.ns = ?1 AND r.key = ?2), 0),
    COALESCE((SELECT f.floor FROM racefree_claim_floors AS f WHERE f.ns = ?1), 0)),
  now, now + ?4, 1, now, now
FROM (SELECT COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE true
ON CONFLICT (ns, key) DO UPDATE SET
  holder     = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.holder ELSE c.holder END,
  fence      = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN COALESCE(c.fence, excluded.fence - 1) + 1 ELSE c.fence END,
  claimed_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.claimed_at ELSE c.claimed_at END,
  expires_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen OR c.holder = excluded.holder THEN excluded.expires_at ELSE c.expires_at END,
  count      = c.count + 1,
  last_seen  = excluded.last_seen
RETURNING holder, fence, claimed_at, expires_at, count, first_seen, last_seen, last_seen AS now, 0 AS inserted
