-- head_unpruned: head, on a schema before migration 014 (a rollout), which
-- has no retention floor: nothing can have been pruned.
-- $1 tenant, $2 scope
SELECT last_seq, cp_n, 0, ''::bytea, '' FROM racefree_audit_heads WHERE tenant = $1 AND scope = $2
