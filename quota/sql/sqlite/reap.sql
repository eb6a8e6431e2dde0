-- reap: delete at most ?4 rows of (?1 tenant, ?2 scope) in racefree_quotas
-- whose expires_at is at or before the cutoff ?3 (computed once by the
-- caller, so that the (tenant, expires_at) index is walked in order and
-- the walk stops after ?4 rows). An expired row means the same as no row,
-- so deleting it changes no decision. SQLite runs it under its only write
-- lock; the caller yields between batches.
DELETE FROM racefree_quotas WHERE tenant = ?1 AND rowid IN (
  SELECT rowid FROM racefree_quotas
  WHERE tenant = ?1 AND scope = ?2 AND expires_at <= ?3
  ORDER BY expires_at
  LIMIT ?4
)
