-- complete: mark the messages delivered whose tenure (id, fence) is still
-- the current one. A holder whose lease lapsed and was taken over (the
-- fence grew) completes nothing: its id is missing from the result. A
-- lapsed lease nobody took over yet still completes: the message was
-- delivered, and delivering it again would only repeat it.
-- $1 tenant, $2 ids, $3 fences (pairwise with ids), $4 clock
WITH clock AS MATERIALIZED (
  SELECT COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
)
UPDATE racefree_outbox AS m
   SET state = 'delivered', available_at = (SELECT now FROM clock), leased_by = ''
  FROM unnest($2::bigint[], $3::bigint[]) AS d(id, fence)
 WHERE m.tenant = $1 AND m.id = d.id AND m.fence = d.fence AND m.state = 'leased'
RETURNING m.id, m.fence
