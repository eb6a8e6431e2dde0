-- fold_gcra_read: the GCRA counter of (?1 tenant, ?2 scope, ?3 key)
-- before consume_gcra_fold charges it, so that each charge of the fold
-- can be told its own decision and counter (quota.go, foldGCRA). No row:
-- no counter, a full bucket.
SELECT tat FROM racefree_quotas
WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'gcra'
