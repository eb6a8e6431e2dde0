-- reap_ledger: delete at most ?3 rows of scope ?1 in racefree_quota_ledger whose expires_at is at or
-- before the cutoff ?2 (computed once by the caller, so that the
-- (scope, expires_at) index is walked in order and the walk stops after ?3
-- rows). An expired row means the same as no row, so deleting it changes
-- no decision. SQLite runs it under its only write lock; the caller
-- yields between batches.
DELETE FROM racefree_quota_ledger WHERE rowid IN (
  SELECT rowid FROM racefree_quota_ledger
  WHERE scope = ?1 AND expires_at <= ?2
  ORDER BY expires_at
  LIMIT ?3
)
