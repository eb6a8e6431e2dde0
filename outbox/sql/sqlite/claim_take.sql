-- claim_take: lease the messages claim_due picked to worker ?5 until
-- now + ?4 ms; each one's fence and attempts grow by one. The due test is
-- repeated here, on the rows as they are.
-- ?1 tenant, ?2 ids (JSON array), ?3 now, ?4 lease ms, ?5 worker
UPDATE racefree_outbox
   SET state        = 'leased',
       fence        = fence + 1,
       attempts     = attempts + 1,
       available_at = ?3 + ?4,
       leased_by    = ?5
 WHERE tenant = ?1 AND id IN (SELECT value FROM json_each(?2))
   AND state IN ('ready', 'leased')
   AND available_at <= ?3
RETURNING id, topic, key, ordered, payload, headers, created_at, attempts, max_attempts, fence, available_at
