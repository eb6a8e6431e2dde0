-- reap: delete up to ?2 of tenant ?1's records that expired at or before
-- the cutoff ?3 (now.sql). SQLite runs one writer at a time, so no row can
-- change under the statement; the expiry test is repeated in the outer
-- WHERE all the same, as on PostgreSQL. The subquery takes the oldest
-- expired rows in (tenant, expires_at) index order; the outer statement
-- probes them by rowid.
-- ?1 tenant, ?2 batch size, ?3 cutoff ms
DELETE FROM racefree_idempotency
WHERE rowid IN (
  SELECT rowid FROM racefree_idempotency
  WHERE tenant = ?1 AND expires_at <= ?3
  ORDER BY expires_at
  LIMIT ?2
) AND tenant = ?1 AND expires_at <= ?3
