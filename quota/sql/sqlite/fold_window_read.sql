-- fold_window_read: the fixed-window counter of (?1 tenant, ?2 scope,
-- ?3 key) before consume_window_fold charges it, so that each charge of
-- the fold can be told its own decision and counter (quota.go,
-- foldWindow). No row: no counter, an empty window.
SELECT tat, used FROM racefree_quotas
WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'window'
