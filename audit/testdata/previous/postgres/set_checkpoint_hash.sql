-- set_checkpoint_hash: make checkpoint $2 the one the next checkpoint of
-- the scope chains to.
-- $1 scope, $2 n, $3 hash
UPDATE racefree_audit_heads SET cp_hash = $3 WHERE scope = $1 AND cp_n = $2
