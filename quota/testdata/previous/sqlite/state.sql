-- state: read the counter of (?1 scope, ?2 key, ?3 kind) and the clock
-- (?4, NULL: the process clock) together, after a charge was denied, so
-- that the caller can say exactly how long to wait. It returns one row
-- even when the counter has no row (NULL tat and used: a full bucket).
SELECT now,
  (SELECT tat FROM racefree_quotas WHERE scope = ?1 AND key = ?2 AND kind = ?3),
  (SELECT used FROM racefree_quotas WHERE scope = ?1 AND key = ?2 AND kind = ?3)
FROM (SELECT COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
