-- prune_attempts: keep only the latest $4 entries of a message's history,
-- in the transaction that added one: drop every entry at or below the
-- ($4 + 1)th highest fence. By rank, not by fence arithmetic: fences may
-- jump (after a failover, on PostgreSQL), and a tenure that ended without
-- a failure (a release) adds no entry. The entry just recorded ($3) is the
-- highest and stays.
-- $1 tenant, $2 message id, $3 fence just recorded, $4 history size
DELETE FROM racefree_outbox_attempts
 WHERE tenant = $1 AND message_id = $2 AND fence < $3::bigint
   AND fence <= (SELECT k.fence FROM racefree_outbox_attempts AS k
                  WHERE k.tenant = $1 AND k.message_id = $2
                  ORDER BY k.fence DESC LIMIT 1 OFFSET $4::bigint)
