-- dead: one page of dead messages matching the filter, by id.
-- ?1 tenant, ?2 ids (JSON array; empty: any), ?3 topic ('': any),
-- ?4 key ('': any), ?5 after id, ?6 limit
SELECT id, topic, key, ordered, payload, headers, state, created_at, available_at, attempts, max_attempts,
       fence, leased_by, last_error
  FROM racefree_outbox
 WHERE tenant = ?1 AND state = 'dead'
   AND (json_array_length(?2) = 0 OR id IN (SELECT value FROM json_each(?2)))
   AND (?3 = '' OR topic = ?3)
   AND (?4 = '' OR key = ?4)
   AND id > ?5
 ORDER BY id
 LIMIT ?6
