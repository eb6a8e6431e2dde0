-- acquire: take the claim on (tenant, ns, key) for holder until now + ttl,
-- in one atomic statement. Every attempt counts (count, last_seen). The
-- holder, fence and expiry change only when the claim is free: never
-- claimed by the lease logic (expires_at IS NULL: rows written before
-- migration 002) or lapsed (expires_at <= now; live while now <
-- expires_at). A new tenure on an existing row increments the fence by
-- exactly one (c.fence + 1 on the row locked by the DO UPDATE). The live
-- holder re-acquiring extends its own claim and keeps the fence. The
-- caller won when the returned holder is its own.
--
-- A key with no row starts one above the greater of the fence of the
-- key's row as the statement's snapshot saw it (a row the reaper deleted
-- since, so the insert no longer conflicts with it) and the floor of the
-- tenant's namespace (which the reaper raises in the transaction that
-- deletes rows). That covers every reap the snapshot saw, but not a row
-- inserted and reaped after the snapshot was taken (the statement may have
-- waited on a lock meanwhile): the statement returns inserted = true
-- (xmax = 0 only on a freshly inserted row) and the caller then runs
-- raise_to_floor, whose fresh snapshot sees every reap that committed
-- before this insert. A row written before migration 002 (NULL fence)
-- continues from the same value.
--
-- The statement locks the key's row (locked) before it reads the clock,
-- and decides with that reading: a statement that waited for the lock of a
-- release (or renew) in another transaction decides after it committed, so
-- it must not decide with a clock read before (the released claim, whose
-- expiry is the release's later reading, would look live, and the same
-- holder would revive the released tenure). A row inserted after the
-- statement's snapshot is locked by the DO UPDATE instead, with the early
-- reading: only an insert and a release of the same key, both within this
-- statement's wait, can then decide it with the earlier clock.
--
-- Every read and the conflict target name the tenant: the row of another
-- tenant with the same namespace and key is another claim.
-- $1 tenant, $2 ns, $3 key, $4 holder, $5 ttl ms, $6 clock (NULL: the database clock)
WITH locked AS (
  SELECT 1 FROM racefree_claims AS l WHERE l.tenant = $1 AND l.ns = $2 AND l.key = $3 FOR UPDATE
), clock AS (
  SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
  FROM (SELECT count(*) FROM locked) AS after_the_lock
)
INSERT INTO racefree_claims AS c (tenant, ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
SELECT $1, $2, $3, $4,
  1 + GREATEST(
    COALESCE((SELECT r.fence FROM racefree_claims AS r WHERE r.tenant = $1 AND r.ns = $2 AND r.key = $3), 0),
    COALESCE((SELECT f.floor FROM racefree_claim_floors AS f WHERE f.tenant = $1 AND f.ns = $2), 0)),
  now, now + $5::bigint, 1, now, now FROM clock
ON CONFLICT (tenant, ns, key) DO UPDATE SET
  holder     = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.holder ELSE c.holder END,
  fence      = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN COALESCE(c.fence, excluded.fence - 1) + 1 ELSE c.fence END,
  claimed_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.claimed_at ELSE c.claimed_at END,
  expires_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen OR c.holder = excluded.holder THEN excluded.expires_at ELSE c.expires_at END,
  count      = c.count + 1,
  last_seen  = excluded.last_seen
RETURNING holder, fence, claimed_at, expires_at, count, first_seen, last_seen, last_seen AS now, (c.xmax = 0) AS inserted
