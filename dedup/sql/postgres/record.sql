-- record: write the downstream fields only while fence is the current
-- fence of the tenant's claim. The claim row is locked FOR SHARE, so a
-- re-claim that commits concurrently is either seen (and the write
-- refused) or waits.
--
-- NULLs: the sub-select is NULL when the claim was reaped (no row) or
-- never leased (a row written before migration 002, NULL fence), and
-- $3 = NULL is then not true: no fence records on it (IS NOT DISTINCT
-- FROM would say the same, since $3 is never NULL: a fence below 1 is
-- refused before the query). A COALESCE that let a missing fence match
-- would record on an event nobody won.
-- $1 tenant, $2 fingerprint, $3 fence, $4 classification, $5 external_id, $6 ns, $7 clock
UPDATE racefree_dedup_events AS e
SET classification = $4, external_id = $5, result_fence = $3,
    result_at = COALESCE($7::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
WHERE e.tenant = $1 AND e.fingerprint = $2
  AND $3 = (SELECT c.fence FROM racefree_claims AS c WHERE c.tenant = $1 AND c.ns = $6 AND c.key = $2 FOR SHARE)
