-- raise_to_floor: after acquire inserted a new row for (tenant, ns, key),
-- lift its fence above the floor of the tenant's namespace if a reap
-- committed after acquire's snapshot was taken but before its insert (that
-- reap deleted an older row of the key, invisible to acquire, and raised
-- the floor in the same commit). This statement's snapshot is taken after
-- the insert, so it sees that floor. The row is the caller's own (holder
-- and fence match the insert), locked by the insert while the caller's
-- transaction is open. No row returned: the fence was already above the
-- floor.
-- A raise only moves up a fence that acquire issued at or above the
-- timeline's floor (acquire.sql), so the raised fence is above it too.
-- $1 tenant, $2 ns, $3 key, $4 holder, $5 fence returned by acquire
UPDATE racefree_claims AS c SET fence = f.floor + 1
FROM racefree_claim_floors AS f
WHERE f.tenant = $1 AND f.ns = $2 AND c.tenant = $1 AND c.ns = $2 AND c.key = $3 AND c.holder = $4 AND c.fence = $5
  AND c.fence <= f.floor
RETURNING c.fence
