-- reap_steps: delete up to ?2 of tenant ?1's recovery points that expired
-- at or before the cutoff ?3 (now.sql): oldest first by the
-- (tenant, expires_at) index, probed by rowid, the expiry test repeated in
-- the outer WHERE as on PostgreSQL.
-- ?1 tenant, ?2 batch size, ?3 cutoff ms
DELETE FROM racefree_idempotency_steps
WHERE rowid IN (
  SELECT rowid FROM racefree_idempotency_steps
  WHERE tenant = ?1 AND expires_at <= ?3
  ORDER BY expires_at
  LIMIT ?2
) AND tenant = ?1 AND expires_at <= ?3
