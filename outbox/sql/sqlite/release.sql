-- release: end the tenure (id, fence) without a verdict: the message is
-- ready again in ?4 ms, its attempts unchanged.
-- ?1 tenant, ?2 id, ?3 fence, ?4 delay ms, ?5 why, ?6 clock
UPDATE racefree_outbox
   SET state = 'ready', available_at = COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?4,
       leased_by = '', last_error = ?5
 WHERE tenant = ?1 AND id = ?2 AND fence = ?3 AND state = 'leased'
