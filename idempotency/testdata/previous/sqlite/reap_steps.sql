-- reap_steps: delete up to ?1 recovery points that expired at or before
-- the cutoff ?2 (now.sql): oldest first by the expiry index, probed by
-- rowid, the expiry test repeated in the outer WHERE as on PostgreSQL.
-- ?1 batch size, ?2 cutoff ms
DELETE FROM racefree_idempotency_steps
WHERE rowid IN (
  SELECT rowid FROM racefree_idempotency_steps
  WHERE expires_at <= ?2
  ORDER BY expires_at
  LIMIT ?1
) AND expires_at <= ?2
