-- acquire_before_floors: acquire for a schema between migrations 002 and
-- 006, which has no fence floors. Reap refuses to run until 006 is applied,
-- so no row is reaped in this mode and a key with no row never had one.
-- It takes the claim on (ns, key) for holder until now + ttl, in one
-- atomic statement. Every attempt counts (count, last_seen). The holder,
-- fence and expiry change only when the claim is free: never claimed by the
-- lease logic (expires_at IS NULL: legacy rows, rows written before
-- migration 002) or lapsed (expires_at <= now; live while now < expires_at).
-- A new tenure increments the fence by exactly one. The live holder
-- re-acquiring extends its own claim and keeps the fence. The caller won
-- when the returned holder is its own.
-- $1 ns, $2 key, $3 holder, $4 ttl ms, $5 clock (NULL: the database clock)
WITH clock AS (
  SELECT COALESCE($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
)
INSERT INTO racefree_claims AS c (ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
SELECT $1, $2, $3, 1, now, now + $4::bigint, 1, now, now FROM clock
ON CONFLICT (ns, key) DO UPDATE SET
  holder     = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.holder ELSE c.holder END,
  fence      = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN COALESCE(c.fence, 0) + 1 ELSE c.fence END,
  claimed_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.claimed_at ELSE c.claimed_at END,
  expires_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen OR c.holder = excluded.holder THEN excluded.expires_at ELSE c.expires_at END,
  count      = c.count + 1,
  last_seen  = excluded.last_seen
RETURNING holder, fence, claimed_at, expires_at, count, first_seen, last_seen, last_seen AS now, false AS inserted
