-- raise_new: raise_to_floor for a caller that cannot pass the fence,
-- because it sends this statement with acquire, in the same transaction,
-- before acquire's result comes back (tenant.Pipelined). It lifts the
-- fence of the row acquire inserted for (tenant, ns, key, holder) above
-- the namespace's floor if a reap committed between acquire's snapshot
-- and its insert. The row acquire inserted is the one with count 1:
-- acquire adds one to the count of a row that was already there, and the
-- row is locked by this transaction. Being the same transaction, no
-- reader ever sees the fence before the raise, and no crash leaves it
-- unraised. It returns the raised fence, or 0 when there was nothing to
-- raise.
-- A raise only moves up a fence that acquire issued at or above the
-- timeline's floor (acquire.sql), so the raised fence is above it too.
-- $1 tenant, $2 ns, $3 key, $4 holder
WITH raised AS (
  UPDATE racefree_claims AS c SET fence = f.floor + 1
  FROM racefree_claim_floors AS f
  WHERE f.tenant = $1 AND f.ns = $2 AND c.tenant = $1 AND c.ns = $2 AND c.key = $3 AND c.holder = $4
    AND c.count = 1 AND c.fence <= f.floor
  RETURNING c.fence
)
SELECT COALESCE((SELECT fence FROM raised), 0)
