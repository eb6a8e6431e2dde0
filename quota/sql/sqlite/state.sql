-- state: read the counter of (?1 tenant, ?2 scope, ?3 key, ?4 kind) and
-- the clock (?5, NULL: the process clock) together, after a charge was
-- denied, so that the caller can say exactly how long to wait. It returns
-- one row even when the counter has no row (NULL tat and used: a full
-- bucket).
SELECT now,
  (SELECT tat FROM racefree_quotas WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = ?4),
  (SELECT used FROM racefree_quotas WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = ?4)
FROM (SELECT COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
