-- renew_many: renew for many calls in one statement, as the combiner sends
-- them (racefree.DB.Combine): each parameter is the array of one renew
-- parameter, one element per call, in the batch's order (the order of the
-- keys). Each call extends the live claim of (holder, fence) as renew.sql
-- does, and the statement returns a row for every call that renewed, led
-- by its place in the arrays (from 1): a call with no row back renewed
-- nothing. As in renew.sql, the clock is read in the WHERE and SET
-- expressions of each row, not once before the update: a call that waited
-- for the lock of a release in another transaction is decided again on
-- the released row (PostgreSQL re-checks the WHERE after the wait) with a
-- reading taken after the release, and finds nothing to renew.
-- $1 tenants, $2 ns, $3 keys, $4 holders, $5 fences, $6 ttls ms, $7 clocks (NULL: the database clock)
UPDATE racefree_claims AS c SET expires_at = COALESCE(u.clock, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) + u.ttl
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[])
  WITH ORDINALITY AS u(tenant, ns, key, holder, fence, ttl, clock, i)
WHERE c.tenant = u.tenant AND c.ns = u.ns AND c.key = u.key AND c.holder = u.holder AND c.fence = u.fence
  AND c.expires_at > COALESCE(u.clock, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
RETURNING u.i, c.holder, c.fence, c.claimed_at, c.expires_at, c.count, c.first_seen, c.last_seen, c.expires_at - u.ttl AS now
