-- acquire: take the claim on (tenant, ns, key) for holder until now + ttl,
-- in one atomic statement. Every attempt counts (count, last_seen). The
-- holder, fence and expiry change only when the claim is free: never
-- claimed by the lease logic (expires_at IS NULL: rows written before
-- migration 002) or lapsed (expires_at <= now; live while now <
-- expires_at). A new tenure on an existing row increments the fence by
-- exactly one (c.fence + 1 on the row locked by the DO UPDATE), or jumps
-- to the timeline's floor after a failover (below). The live
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
--
-- A failover: every new tenure's fence is at least the timeline's floor,
-- (timeline - 1) * 2^40 + 1, read in the same statement (tl_floor): the
-- current timeline ID is the first 8 hex digits of the name of the WAL
-- file being written (pg_walfile_name names it by the insertion
-- timeline), and it goes up at every promotion. A failover that lost the
-- last commits (an asynchronous standby promoted) lost fences the old
-- primary acknowledged, and the new primary's rows hold older ones: c.fence
-- + 1 alone would hand them out again. Every fence the old timeline
-- issued is below the new timeline's floor as long as the old timeline
-- issued fewer than 2^40 tenures in the namespace (a fence past that keeps
-- growing, into the next timeline's range, and only a failover that then
-- loses it could repeat one). On timeline 1 the floor is 1, so fences
-- there are what they would be without it. The new primary's timeline
-- must be above the old one's: true of a streaming standby promoted
-- (pg_auto_failover, Patroni); a cluster restored from a dump restarts at
-- timeline 1 with its rows, so its fences keep growing from them.
-- $1 tenant, $2 ns, $3 key, $4 holder, $5 ttl ms, $6 clock (NULL: the database clock)
WITH locked AS (
  SELECT 1 FROM racefree_claims AS l WHERE l.tenant = $1 AND l.ns = $2 AND l.key = $3 FOR UPDATE
), clock AS (
  SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now,
    ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40) + 1 AS tl_floor
  FROM (SELECT count(*) FROM locked) AS after_the_lock
)
INSERT INTO racefree_claims AS c (tenant, ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
SELECT $1, $2, $3, $4,
  GREATEST(tl_floor, 1 + GREATEST(
    COALESCE((SELECT r.fence FROM racefree_claims AS r WHERE r.tenant = $1 AND r.ns = $2 AND r.key = $3), 0),
    COALESCE((SELECT f.floor FROM racefree_claim_floors AS f WHERE f.tenant = $1 AND f.ns = $2), 0))),
  now, now + $5::bigint, 1, now, now FROM clock
ON CONFLICT (tenant, ns, key) DO UPDATE SET
  holder     = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.holder ELSE c.holder END,
  fence      = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen
                    THEN GREATEST(COALESCE(c.fence, excluded.fence - 1) + 1, (SELECT tl_floor FROM clock)) ELSE c.fence END,
  claimed_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.claimed_at ELSE c.claimed_at END,
  expires_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen OR c.holder = excluded.holder THEN excluded.expires_at ELSE c.expires_at END,
  count      = c.count + 1,
  last_seen  = excluded.last_seen
RETURNING holder, fence, claimed_at, expires_at, count, first_seen, last_seen, last_seen AS now, (c.xmax = 0) AS inserted
