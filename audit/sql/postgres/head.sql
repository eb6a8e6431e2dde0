-- head: a tenant's scope's committed chain head and checkpoint count.
-- Verify reads it before the entries, so that entries committed in between
-- can only make the chain longer than the head, never shorter.
-- $1 tenant, $2 scope
SELECT last_seq, cp_n FROM racefree_audit_heads WHERE tenant = $1 AND scope = $2
