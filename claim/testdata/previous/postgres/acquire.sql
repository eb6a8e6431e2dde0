-- acquire: take the claim on (ns, key) for holder until now + ttl, in one
-- atomic statement. Every attempt counts (count, last_seen). The holder,
-- fence and expiry change only when the claim is free: never claimed by the
-- lease logic (expires_at IS NULL: legacy rows, rows written before
-- migration 002) or lapsed (expires_at <= now; live while now < expires_at).
-- A new tenure on an existing row increments the fence by exactly one
-- (c.fence + 1 on the row locked by the DO UPDATE). The live holder
-- re-acquiring extends its own claim and keeps the fence. The caller won
-- when the returned holder is its own.
--
-- A key with no row starts one above the greater of the fence of the
-- key's row as the statement's snapshot saw it (a row the reaper deleted
-- since, so the insert no longer conflicts with it) and the namespace's
-- floor (which the reaper raises in the transaction that deletes rows).
-- That covers every reap the snapshot saw, but not a row inserted and
-- reaped after the snapshot was taken (the statement may have waited on a
-- lock meanwhile): the statement returns inserted = true (xmax = 0 only on
-- a freshly inserted row) and the caller then runs raise_to_floor, whose
-- fresh snapshot sees every reap that committed before this insert. A
-- legacy row (NULL fence) continues from the same value.
-- $1 ns, $2 key, $3 holder, $4 ttl ms, $5 clock (NULL: the database clock)
WITH clock AS (
  SELECT COALESCE($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
)
INSERT INTO racefree_claims AS c (ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
SELECT $1, $2, $3,
  1 + GREATEST(
    COALESCE((SELECT r.fence FROM racefree_claims AS r WHERE r.ns = $1 AND r.key = $2), 0),
    COALESCE((SELECT f.floor FROM racefree_claim_floors AS f WHERE f.ns = $1), 0)),
  now, now + $4::bigint, 1, now, now FROM clock
ON CONFLICT (ns, key) DO UPDATE SET
  holder     = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.holder ELSE c.holder END,
  fence      = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN COALESCE(c.fence, excluded.fence - 1) + 1 ELSE c.fence END,
  claimed_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.claimed_at ELSE c.claimed_at END,
  expires_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen OR c.holder = excluded.holder THEN excluded.expires_at ELSE c.expires_at END,
  count      = c.count + 1,
  last_seen  = excluded.last_seen
RETURNING holder, fence, claimed_at, expires_at, count, first_seen, last_seen, last_seen AS now, (c.xmax = 0) AS inserted
