-- fail: end the tenure (id, fence) with a failure. The message dies when
-- the failure is permanent (?4) or it has no attempt left; otherwise it is
-- ready again in ?5 ms. Either way the lease ends now: a dead message
-- holds nothing until its lease would have lapsed.
-- ?1 tenant, ?2 id, ?3 fence, ?4 permanent, ?5 delay ms, ?6 error, ?7 clock
UPDATE racefree_outbox
   SET state        = CASE WHEN ?4 OR attempts >= max_attempts THEN 'dead' ELSE 'ready' END,
       available_at = COALESCE(?7, CAST(unixepoch('subsec') * 1000 AS INTEGER))
                      + CASE WHEN ?4 OR attempts >= max_attempts THEN 0 ELSE ?5 END,
       leased_by    = '',
       last_error   = ?6
 WHERE tenant = ?1 AND id = ?2 AND fence = ?3 AND state = 'leased'
RETURNING state, available_at, COALESCE(?7, CAST(unixepoch('subsec') * 1000 AS INTEGER))
