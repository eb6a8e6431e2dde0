-- release_many: release (release.sql) for many calls in one statement, as
-- the combiner sends them (racefree.DB.Combine, eight calls or more). ?1
-- is a JSON array with one element per call, in the batch's order (one
-- call per key), each the array of release's parameters: [tenant, ns,
-- key, holder, fence, clock]. Each call ends the tenure of (holder,
-- fence) now, as release does: a tenure that lapsed without being taken
-- over still matches, so a retried release succeeds, and a NULL fence (a
-- row written before migration 002) matches nobody's release.
--
-- It returns the place in ?1 (from 1) of every call that matched its row:
-- a call with no row back matched nothing, as a release that affected no
-- row. RETURNING sees only the row it wrote, in no promised order: the
-- place comes from ?2, a JSON object from the hex of each call's combiner
-- key (claim.go's combineKey: 'claim', NUL, ns, NUL, key) to its place (a
-- batch is one tenant's).
--
-- The arguments reach the WHERE clause through the subquery p, not as
-- parameters compared with indexed columns (release.sql says why).
-- ?1 calls [[tenant, ns, key, holder, fence, clock (NULL: the process clock)], ...], ?2 places {hex(combiner key): place}
UPDATE racefree_claims AS c SET expires_at = MIN(c.expires_at, p.now)
FROM (SELECT j.value ->> 0 AS tenant, j.value ->> 1 AS ns, j.value ->> 2 AS key, j.value ->> 3 AS holder, j.value ->> 4 AS fence,
        COALESCE(j.value ->> 5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now
      FROM jsonb_each(?1) AS j) AS p
WHERE c.tenant = p.tenant AND c.ns = p.ns AND c.key = p.key AND c.holder = p.holder AND c.fence = p.fence
RETURNING ?2 ->> ('$."' || hex('claim' || char(0) || ns || char(0) || key) || '"')
