-- acquire: take the claim on (tenant, ns, key) for holder until now + ttl,
-- in one atomic statement. Every attempt counts (count, last_seen). The
-- holder, fence and expiry change only when the claim is free: never
-- claimed by the lease logic (expires_at IS NULL: rows written before
-- migration 002) or lapsed (expires_at <= now; live while now <
-- expires_at). A new tenure on an existing row increments the fence by
-- exactly one. The live holder re-acquiring extends its own claim and
-- keeps the fence. The caller won when the returned holder is its own.
--
-- A key with no row starts one above the floor of the tenant's namespace,
-- the highest fence the reaper deleted there (it raises the floor in the
-- transaction that deletes the rows), so a fence never goes backwards
-- after a reap. The row's own fence is read too, as on PostgreSQL;
-- SQLite's single writer makes it redundant. A row written before
-- migration 002 (NULL fence) continues from the same value.
--
-- Every read and the conflict target name the tenant: the row of another
-- tenant with the same namespace and key is another claim.
-- ?1 tenant, ?2 ns, ?3 key, ?4 holder, ?5 ttl ms, ?6 clock (NULL: the process clock)
INSERT INTO racefree_claims AS c (tenant, ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
SELECT ?1, ?2, ?3, ?4,
  1 + MAX(
    COALESCE((SELECT r.fence FROM racefree_claims AS r WHERE r.tenant = ?1 AND r.ns = ?2 AND r.key = ?3), 0),
    COALESCE((SELECT f.floor FROM racefree_claim_floors AS f WHERE f.tenant = ?1 AND f.ns = ?2), 0)),
  now, now + ?5, 1, now, now
FROM (SELECT COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE true
ON CONFLICT (tenant, ns, key) DO UPDATE SET
  holder     = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.holder ELSE c.holder END,
  fence      = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN COALESCE(c.fence, excluded.fence - 1) + 1 ELSE c.fence END,
  claimed_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.claimed_at ELSE c.claimed_at END,
  expires_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen OR c.holder = excluded.holder THEN excluded.expires_at ELSE c.expires_at END,
  count      = c.count + 1,
  last_seen  = excluded.last_seen
RETURNING holder, fence, claimed_at, expires_at, count, first_seen, last_seen, last_seen AS now, 0 AS inserted
