-- redrive: make the dead messages matching the filter ready now, with a
-- full set of attempts. Only dead messages: a ready, leased or delivered
-- one is left as it is. Their history stays (it is keyed by fence, which
-- keeps growing).
-- ?1 tenant, ?2 ids (JSON array; empty: any), ?3 topic ('': any),
-- ?4 key ('': any), ?5 clock
UPDATE racefree_outbox
   SET state = 'ready', attempts = 0, available_at = COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER))
 WHERE tenant = ?1 AND state = 'dead'
   AND (json_array_length(?2) = 0 OR id IN (SELECT value FROM json_each(?2)))
   AND (?3 = '' OR topic = ?3)
   AND (?4 = '' OR key = ?4)
RETURNING id
