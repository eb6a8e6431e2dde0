-- acquire_many: acquire (acquire.sql) for many calls in one statement, as
-- the combiner sends them (racefree.DB.Combine): each parameter is the
-- array of one acquire parameter, one element per call, in the batch's
-- order (the order of the keys; one call per key). It decides each key as
-- acquire decides it, and returns one row per call, led by the call's
-- place in the arrays (from 1), so that each caller reads its own row:
-- the rows of an INSERT come back in no promised order, and a row names
-- its key, not its caller, so the statement joins them back to their
-- place by (ns, key).
--
-- It locks the rows of the keys that exist, in the arrays' order (the
-- order every batch takes its locks in, so that two batches never wait for
-- each other in a cycle), and only then reads the database clock, once,
-- for every call: a call that waited for a release in another transaction
-- decides with a reading taken after the release committed (acquire.sql
-- says why). A call with an injected clock decides with its own.
--
-- A new row starts one above the greater of the snapshot's fence for the
-- key and the namespace's floor; the caller raises it with
-- raise_new_many, in the same transaction, past a reap this snapshot did
-- not see (acquire.sql). Every new tenure's fence is at least the
-- timeline's floor, (timeline - 1) * 2^40 + 1, read once with the clock,
-- so that fences jump past a failover that lost commits (acquire.sql says
-- how and under which assumption). Tenancy and row-level security are acquire's: the
-- batch is one tenant's, set with set_config(…, true) before this
-- statement, and every read and the conflict target name the tenant.
-- $1 tenants, $2 ns, $3 keys, $4 holders, $5 ttls ms, $6 clocks (NULL: the database clock)
WITH input AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[])
    WITH ORDINALITY AS u(tenant, ns, key, holder, ttl, clock, i)
), locked AS (
  SELECT 1 FROM input AS u
  JOIN racefree_claims AS l ON l.tenant = u.tenant AND l.ns = u.ns AND l.key = u.key
  ORDER BY u.i FOR UPDATE OF l
), clock AS (
  SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now,
    ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40) + 1 AS tl_floor
  FROM (SELECT count(*) FROM locked) AS after_the_lock
), acquired AS (
  INSERT INTO racefree_claims AS c (tenant, ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
  SELECT u.tenant, u.ns, u.key, u.holder,
    GREATEST(t.tl_floor, 1 + GREATEST(
      COALESCE((SELECT r.fence FROM racefree_claims AS r WHERE r.tenant = u.tenant AND r.ns = u.ns AND r.key = u.key), 0),
      COALESCE((SELECT f.floor FROM racefree_claim_floors AS f WHERE f.tenant = u.tenant AND f.ns = u.ns), 0))),
    t.now, t.now + u.ttl, 1, t.now, t.now
  FROM input AS u CROSS JOIN LATERAL (SELECT COALESCE(u.clock, clock.now) AS now, clock.tl_floor FROM clock) AS t
  ORDER BY u.i
  ON CONFLICT (tenant, ns, key) DO UPDATE SET
    holder     = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.holder ELSE c.holder END,
    fence      = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen
                      THEN GREATEST(COALESCE(c.fence, excluded.fence - 1) + 1, (SELECT tl_floor FROM clock)) ELSE c.fence END,
    claimed_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.claimed_at ELSE c.claimed_at END,
    expires_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen OR c.holder = excluded.holder THEN excluded.expires_at ELSE c.expires_at END,
    count      = c.count + 1,
    last_seen  = excluded.last_seen
  RETURNING c.ns, c.key, c.holder, c.fence, c.claimed_at, c.expires_at, c.count, c.first_seen, c.last_seen, (c.xmax = 0) AS inserted
)
SELECT u.i, a.holder, a.fence, a.claimed_at, a.expires_at, a.count, a.first_seen, a.last_seen, a.last_seen AS now, a.inserted
FROM acquired AS a JOIN input AS u ON u.ns = a.ns AND u.key = a.key
