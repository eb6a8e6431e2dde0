-- raise_to_floor: after acquire inserted a new row for (ns, key), lift its
-- fence above the namespace's floor if a reap committed after acquire's
-- snapshot was taken but before its insert (that reap deleted an older row
-- of the key, invisible to acquire, and raised the floor in the same
-- commit). This statement's snapshot is taken after the insert, so it sees
-- that floor. The row is the caller's own (holder and fence match the
-- insert), locked by the insert while the caller's transaction is open.
-- No row returned: the fence was already above the floor.
-- $1 ns, $2 key, $3 holder, $4 fence returned by acquire
UPDATE racefree_claims AS c SET fence = f.floor + 1
FROM racefree_claim_floors AS f
WHERE f.ns = $1 AND c.ns = $1 AND c.key = $2 AND c.holder = $3 AND c.fence = $4
  AND c.fence <= f.floor
RETURNING c.fence
