-- renew_many: renew for many calls in one statement, as the combiner sends
-- them (racefree.DB.Combine): each parameter is the array of one renew
-- parameter, one element per call, in the batch's order. Each call extends
-- the live claim of (holder, fence) as renew.sql does, and the statement
-- returns a row for every call that renewed, led by its place in the
-- arrays (from 1): a call with no row back renewed nothing. It locks the
-- rows in the arrays' order first, the order every batch takes its locks
-- in. As in renew.sql, the clock is read in the WHERE and SET expressions
-- of each row, after the row's lock: a call that waited for a release in
-- another transaction decides on the released row with a reading taken
-- after the release, and finds nothing to renew.
-- $1 tenants, $2 ns, $3 keys, $4 holders, $5 fences, $6 ttls ms, $7 clocks (NULL: the database clock)
WITH input AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[])
    WITH ORDINALITY AS u(tenant, ns, key, holder, fence, ttl, clock, i)
), locked AS (
  SELECT 1 FROM input AS u
  JOIN racefree_claims AS l ON l.tenant = u.tenant AND l.ns = u.ns AND l.key = u.key
  ORDER BY u.i FOR UPDATE OF l
)
UPDATE racefree_claims AS c SET expires_at = COALESCE(u.clock, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) + u.ttl
FROM input AS u, (SELECT count(*) FROM locked) AS after_the_lock
WHERE c.tenant = u.tenant AND c.ns = u.ns AND c.key = u.key AND c.holder = u.holder AND c.fence = u.fence
  AND c.expires_at > COALESCE(u.clock, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
RETURNING u.i, c.holder, c.fence, c.claimed_at, c.expires_at, c.count, c.first_seen, c.last_seen, c.expires_at - u.ttl AS now
