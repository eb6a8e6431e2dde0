-- renew_many: renew (renew.sql) for many calls in one statement, as the
-- combiner sends them (racefree.DB.Combine, eight calls or more). ?1 is a
-- JSON array with one element per call, in the batch's order (one call
-- per key), each the array of renew's parameters: [tenant, ns, key,
-- holder, fence, ttl ms, clock]. Each call extends the live claim of
-- (holder, fence) to now + ttl and keeps the fence, as renew does: a
-- lapsed claim, one taken over since, or a row written before migration
-- 002 (NULL fence and expiry: = and > are not true) changes nothing.
--
-- It returns a row for every call that renewed, led by the call's place
-- in ?1 (from 1): a call with no row back renewed nothing. RETURNING sees
-- only the row it wrote, in no promised order: the place comes from ?2,
-- a JSON object from the hex of each call's combiner key (claim.go's
-- combineKey: 'claim', NUL, ns, NUL, key) to its place (a batch is one
-- tenant's), and the reading of the clock the call decided with is
-- expires_at less its ttl, read from ?1 at that place.
--
-- The arguments reach the WHERE clause through the subquery p, not as
-- parameters compared with indexed columns (renew.sql says why: SQLite
-- built with STAT4 would prepare the statement again at every call).
-- ?1 calls [[tenant, ns, key, holder, fence, ttl ms, clock (NULL: the process clock)], ...], ?2 places {hex(combiner key): place}
UPDATE racefree_claims AS c SET expires_at = p.now + p.ttl
FROM (SELECT j.value ->> 0 AS tenant, j.value ->> 1 AS ns, j.value ->> 2 AS key, j.value ->> 3 AS holder, j.value ->> 4 AS fence,
        j.value ->> 5 AS ttl, COALESCE(j.value ->> 6, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now
      FROM jsonb_each(?1) AS j) AS p
WHERE c.tenant = p.tenant AND c.ns = p.ns AND c.key = p.key AND c.holder = p.holder AND c.fence = p.fence
  AND c.expires_at > p.now
RETURNING ?2 ->> ('$."' || hex('claim' || char(0) || ns || char(0) || key) || '"'),
  holder, fence, claimed_at, expires_at, count, first_seen, last_seen,
  expires_at - (?1 ->> ('$[' || ((?2 ->> ('$."' || hex('claim' || char(0) || ns || char(0) || key) || '"')) - 1) || '][5]'))
