-- set_checkpoint_hash: make checkpoint ?3 the one the next checkpoint of
-- the tenant's scope chains to.
-- ?1 tenant, ?2 scope, ?3 n, ?4 hash
UPDATE racefree_audit_heads SET cp_hash = ?4 WHERE tenant = ?1 AND scope = ?2 AND cp_n = ?3
