-- reap: delete up to ?1 records that expired at or before the cutoff ?2
-- (now.sql). SQLite runs one writer at a time, so no row can change under
-- the statement; the expiry test is repeated in the outer WHERE all the
-- same, as on PostgreSQL. The subquery takes the oldest expired rows in
-- expiry-index order; the outer statement probes them by rowid.
-- ?1 batch size, ?2 cutoff ms
DELETE FROM racefree_idempotency
WHERE rowid IN (
  SELECT rowid FROM racefree_idempotency
  WHERE expires_at <= ?2
  ORDER BY expires_at
  LIMIT ?1
) AND expires_at <= ?2
