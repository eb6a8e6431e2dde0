-- record: write the downstream fields only while fence is the claim's
-- current fence, in one statement (SQLite runs it under the write lock).
-- ?1 fingerprint, ?2 fence, ?3 classification, ?4 external_id, ?5 ns, ?6 clock
UPDATE racefree_dedup_events
SET classification = ?3, external_id = ?4, result_fence = ?2,
    result_at = COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER))
WHERE fingerprint = ?1
  AND ?2 = (SELECT c.fence FROM racefree_claims AS c WHERE c.ns = ?5 AND c.key = ?1)
