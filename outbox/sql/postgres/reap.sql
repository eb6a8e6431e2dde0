-- reap: delete at most $3 messages delivered at least $2 ms ago, and their
-- history. The cutoff is one materialized value, so that the delivered
-- index can be probed with it; the batch is picked oldest first and skips
-- rows another transaction holds locked; the DELETE repeats the test in
-- its own WHERE (invariant 10). Only delivered messages: pending and dead
-- ones are never reaped.
-- $1 tenant, $2 retention ms, $3 limit, $4 clock
WITH cutoff AS MATERIALIZED (
  SELECT COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) - $2::bigint AS ms
), gone AS (
  DELETE FROM racefree_outbox
   WHERE tenant = $1
     AND id = ANY (ARRAY(
           SELECT id FROM racefree_outbox
            WHERE tenant = $1 AND state = 'delivered' AND available_at <= (SELECT ms FROM cutoff)
            ORDER BY available_at
            LIMIT $3
            FOR UPDATE SKIP LOCKED))
     AND state = 'delivered' AND available_at <= (SELECT ms FROM cutoff)
  RETURNING id
), history AS (
  DELETE FROM racefree_outbox_attempts WHERE tenant = $1 AND message_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone
