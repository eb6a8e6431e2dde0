-- reap_retired: the first half of reaping families on SQLite (no
-- data-modifying CTE): delete the retired tokens of the families that
-- reap_families deletes next, in the same transaction, whose write lock
-- keeps the two selections equal.
-- ?1 tenant, ?2 grace ms, ?3 batch, ?4 clock
DELETE FROM racefree_refresh_retired
WHERE tenant = ?1 AND family IN (
  SELECT o.family FROM racefree_refresh_families AS o
  WHERE o.tenant = ?1 AND o.head_expires_at <= COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) - ?2
  ORDER BY o.head_expires_at, o.family LIMIT ?3)
