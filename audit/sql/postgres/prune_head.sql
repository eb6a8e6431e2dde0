-- prune_head: read a tenant's scope's last number and retention floor
-- before pruning, locking the head row until the transaction ends, so
-- that no append or checkpoint of the scope runs between the read and
-- the commit. No row: the scope has no entry.
-- $1 tenant, $2 scope
SELECT last_seq, floor_seq FROM racefree_audit_heads WHERE tenant = $1 AND scope = $2 FOR UPDATE
