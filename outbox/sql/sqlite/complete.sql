-- complete: mark the messages delivered whose tenure (id, fence) is still
-- the current one. A holder whose lease lapsed and was taken over (the
-- fence grew) completes nothing: its id is missing from the result. A
-- lapsed lease nobody took over yet still completes: the message was
-- delivered, and delivering it again would only repeat it.
-- ?1 tenant, ?2 tenures (JSON array of [id, fence]), ?3 clock
UPDATE racefree_outbox
   SET state = 'delivered', available_at = COALESCE(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER)), leased_by = ''
 WHERE tenant = ?1 AND state = 'leased'
   AND (id, fence) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?2))
RETURNING id, fence
