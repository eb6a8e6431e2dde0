-- fold_sliding_read: the sliding-window counter of (?1 tenant, ?2 scope,
-- ?3 key) before consume_sliding_fold charges it, so that each charge of
-- the fold can be told its own decision and counter (sliding.go,
-- foldSliding). No row: nothing counted.
SELECT tat, used, prev FROM racefree_quotas
WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'sliding_window'
