-- state_sliding: read the sliding-window counter of (?1 tenant, ?2 scope,
-- ?3 key) and the clock (?4, NULL: the process clock) together, after a
-- charge was denied, so that the caller can say exactly how long to wait.
-- It returns one row even when the counter has no row (NULL tat, used and
-- prev: nothing counted).
SELECT now,
  (SELECT tat FROM racefree_quotas WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'sliding_window'),
  (SELECT used FROM racefree_quotas WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'sliding_window'),
  (SELECT prev FROM racefree_quotas WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'sliding_window')
FROM (SELECT COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
