-- discard: delete the dead messages matching the filter and their
-- history. Only dead messages.
-- $1 tenant, $2 ids (empty: any), $3 topic ('': any), $4 key ('': any)
WITH gone AS (
  DELETE FROM racefree_outbox AS m
   WHERE m.tenant = $1 AND m.state = 'dead'
     AND (cardinality($2::bigint[]) = 0 OR m.id = ANY ($2::bigint[]))
     AND ($3 = '' OR m.topic = $3)
     AND ($4 = '' OR m.key = $4)
  RETURNING m.id
), history AS (
  DELETE FROM racefree_outbox_attempts WHERE tenant = $1 AND message_id IN (SELECT id FROM gone)
)
SELECT id FROM gone
