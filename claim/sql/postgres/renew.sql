-- renew: extend a live claim held by (holder, fence) to now + ttl, keeping
-- the fence. A lapsed claim, or one taken over since, changes nothing and
-- returns no row.
--
-- NULLs: a row written before migration 002 has a NULL fence and expiry;
-- c.fence = $5 and c.expires_at > now are then not true, so it is never
-- renewed (IS NOT DISTINCT FROM would say the same: $5 is never NULL).
-- The clock is read in the WHERE and SET expressions themselves, not once
-- before the update: when the statement waits for the row lock of a
-- release in another transaction, PostgreSQL evaluates the WHERE again on
-- the released row, and then with a clock read after the wait, so the
-- released claim is not renewed. (A reading taken before the wait would
-- find the release's expiry still ahead and revive the tenure.) SET reads
-- the clock after WHERE did, so the new expiry is at least now + ttl.
-- $1 tenant, $2 ns, $3 key, $4 holder, $5 fence, $6 ttl ms, $7 clock
UPDATE racefree_claims AS c SET expires_at = COALESCE($7::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) + $6::bigint
WHERE c.tenant = $1 AND c.ns = $2 AND c.key = $3 AND c.holder = $4 AND c.fence = $5
  AND c.expires_at > COALESCE($7::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
RETURNING c.holder, c.fence, c.claimed_at, c.expires_at, c.count, c.first_seen, c.last_seen, c.expires_at - $6::bigint AS now
