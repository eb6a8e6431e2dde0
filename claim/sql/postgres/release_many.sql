-- release_many: release for many calls in one statement, as the combiner
-- sends them (racefree.DB.Combine): each parameter is the array of one
-- release parameter, one element per call, in the batch's order. Each
-- call ends the tenure of (holder, fence) as release.sql does, and the
-- statement returns the place in the arrays (from 1) of every call that
-- matched its row: a call with no row back matched nothing, as a release
-- that affected no row. It locks the rows in the arrays' order first, the
-- order every batch takes its locks in. A NULL fence (a row written before
-- migration 002) matches nobody's release, as in release.sql.
-- $1 tenants, $2 ns, $3 keys, $4 holders, $5 fences, $6 clocks (NULL: the database clock)
WITH input AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[])
    WITH ORDINALITY AS u(tenant, ns, key, holder, fence, clock, i)
), locked AS (
  SELECT 1 FROM input AS u
  JOIN racefree_claims AS l ON l.tenant = u.tenant AND l.ns = u.ns AND l.key = u.key
  ORDER BY u.i FOR UPDATE OF l
)
UPDATE racefree_claims AS c
SET expires_at = LEAST(c.expires_at, COALESCE(u.clock, (extract(epoch FROM clock_timestamp()) * 1000)::bigint))
FROM input AS u, (SELECT count(*) FROM locked) AS after_the_lock
WHERE c.tenant = u.tenant AND c.ns = u.ns AND c.key = u.key AND c.holder = u.holder AND c.fence = u.fence
RETURNING u.i
