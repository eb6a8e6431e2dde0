-- raise_new_many: raise_new for many calls in one statement, sent after
-- acquire_many in the same transaction, with the same arrays' first four
-- (one element per call, in the batch's order). It lifts the fence of
-- each row acquire_many inserted (count 1, the caller's holder) above the
-- namespace's floor when a reap committed between acquire_many's snapshot
-- and its insert; this statement's own snapshot is fresh and sees it. It
-- returns one row per call, led by the call's place in the arrays: the
-- raised fence, or 0 when there was nothing to raise.
-- A raise only moves up a fence that acquire issued at or above the
-- timeline's floor (acquire.sql), so the raised fence is above it too.
-- $1 tenants, $2 ns, $3 keys, $4 holders
WITH input AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS u(tenant, ns, key, holder, i)
), raised AS (
  UPDATE racefree_claims AS c SET fence = f.floor + 1
  FROM input AS u, racefree_claim_floors AS f
  WHERE f.tenant = u.tenant AND f.ns = u.ns AND c.tenant = u.tenant AND c.ns = u.ns AND c.key = u.key AND c.holder = u.holder
    AND c.count = 1 AND c.fence <= f.floor
  RETURNING u.i, c.fence
)
SELECT u.i, COALESCE(r.fence, 0) FROM input AS u LEFT JOIN raised AS r ON r.i = u.i
