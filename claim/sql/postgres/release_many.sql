-- release_many: release for many calls in one statement, as the combiner
-- sends them (racefree.DB.Combine): each parameter is the array of one
-- release parameter, one element per call, in the batch's order (the
-- order of the keys). Each call ends the tenure of (holder, fence) as
-- release.sql does, and the statement returns the place in the arrays
-- (from 1) of every call that matched its row: a call with no row back
-- matched nothing, as a release that affected no row. A NULL fence (a row
-- written before migration 002) matches nobody's release, as in
-- release.sql. Each row takes the clock when it is updated, so a release
-- that waited for a row's lock never sets an expiry earlier than the
-- reading of a release alone.
-- $1 tenants, $2 ns, $3 keys, $4 holders, $5 fences, $6 clocks (NULL: the database clock)
UPDATE racefree_claims AS c
SET expires_at = LEAST(c.expires_at, COALESCE(u.clock, (extract(epoch FROM clock_timestamp()) * 1000)::bigint))
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[])
  WITH ORDINALITY AS u(tenant, ns, key, holder, fence, clock, i)
WHERE c.tenant = u.tenant AND c.ns = u.ns AND c.key = u.key AND c.holder = u.holder AND c.fence = u.fence
RETURNING u.i
