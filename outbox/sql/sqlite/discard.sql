-- discard: delete the dead messages matching the filter. Only dead
-- messages.
-- ?1 tenant, ?2 ids (JSON array; empty: any), ?3 topic ('': any),
-- ?4 key ('': any)
DELETE FROM racefree_outbox
 WHERE tenant = ?1 AND state = 'dead'
   AND (json_array_length(?2) = 0 OR id IN (SELECT value FROM json_each(?2)))
   AND (?3 = '' OR topic = ?3)
   AND (?4 = '' OR key = ?4)
RETURNING id
