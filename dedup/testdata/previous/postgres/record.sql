-- record: write the downstream fields only while fence is the claim's
-- current fence. The claim row is locked FOR SHARE, so a re-claim that
-- commits concurrently is either seen (and the write refused) or waits.
-- $1 fingerprint, $2 fence, $3 classification, $4 external_id, $5 ns, $6 clock
UPDATE racefree_dedup_events AS e
SET classification = $3, external_id = $4, result_fence = $2,
    result_at = COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
WHERE e.fingerprint = $1
  AND $2 = (SELECT c.fence FROM racefree_claims AS c WHERE c.ns = $5 AND c.key = $1 FOR SHARE)
