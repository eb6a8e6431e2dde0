-- acquire_many: acquire (acquire.sql) for many calls in one statement, as
-- the combiner sends them (racefree.DB.Combine, eight calls or more: the
-- SQLite engine's ManyFrom). ?1 is a JSON array with one element per
-- call, in the batch's order (the order of the keys; one call per key),
-- each the array of acquire's parameters: [tenant, ns, key, holder, ttl
-- ms, clock]. It decides each key as acquire decides it, with the same
-- ON CONFLICT clauses: a free key (never claimed, lapsed, released)
-- starts a tenure whose fence is the row's plus exactly one, the live
-- holder re-acquiring keeps its fence and extends its expiry, anyone else
-- loses, and every attempt counts. A key with no row starts one above
-- the greater of its row's fence and the floor of the tenant's namespace,
-- so a fence never goes backwards after a reap; the batch's IMMEDIATE
-- transaction holds SQLite's write lock, so the statement sees every
-- commit and no reap runs beside it.
--
-- It returns one row per call, led by the call's place in ?1 (from 1), so
-- that each caller reads its own row. RETURNING sees only the row it
-- wrote, and its rows come back in no promised order: the place comes
-- from ?2, a JSON object from the hex of each call's combiner key
-- (claim.go's combineKey: 'claim', NUL, ns, NUL, key) to its place. A
-- batch is one tenant's (the combiner's group), so the key names the
-- call; the tenant still decides every read and the conflict target.
-- A hex label because a JSON path cannot quote a label holding a quote.
--
-- Each call decides with its own clock parameter, or the process clock,
-- which SQLite reads once for the statement: no call of the batch can
-- commit before another, so one reading serves them all.
-- ?1 calls [[tenant, ns, key, holder, ttl ms, clock (NULL: the process clock)], ...], ?2 places {hex(combiner key): place}
INSERT INTO racefree_claims AS c (tenant, ns, key, holder, fence, claimed_at, expires_at, count, first_seen, last_seen)
SELECT u.tenant, u.ns, u.key, u.holder,
  1 + MAX(
    COALESCE((SELECT r.fence FROM racefree_claims AS r WHERE r.tenant = u.tenant AND r.ns = u.ns AND r.key = u.key), 0),
    COALESCE((SELECT f.floor FROM racefree_claim_floors AS f WHERE f.tenant = u.tenant AND f.ns = u.ns), 0)),
  u.now, u.now + u.ttl, 1, u.now, u.now
FROM (SELECT j.value ->> 0 AS tenant, j.value ->> 1 AS ns, j.value ->> 2 AS key, j.value ->> 3 AS holder,
        j.value ->> 4 AS ttl, COALESCE(j.value ->> 5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now
      FROM jsonb_each(?1) AS j) AS u
WHERE true
ON CONFLICT (tenant, ns, key) DO UPDATE SET
  holder     = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.holder ELSE c.holder END,
  fence      = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN COALESCE(c.fence, excluded.fence - 1) + 1 ELSE c.fence END,
  claimed_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen THEN excluded.claimed_at ELSE c.claimed_at END,
  expires_at = CASE WHEN c.expires_at IS NULL OR c.expires_at <= excluded.last_seen OR c.holder = excluded.holder THEN excluded.expires_at ELSE c.expires_at END,
  count      = c.count + 1,
  last_seen  = excluded.last_seen
RETURNING ?2 ->> ('$."' || hex('claim' || char(0) || ns || char(0) || key) || '"'),
  holder, fence, claimed_at, expires_at, count, first_seen, last_seen, last_seen AS now, 0 AS inserted
