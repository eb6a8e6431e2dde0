-- head: a tenant's scope's committed chain head, checkpoint count and
-- retention floor (the last entry pruned, its MAC and the key epoch after
-- it; 0 when nothing was pruned). Verify reads it before the entries, so
-- that entries committed in between can only make the chain longer than
-- the head, never shorter, and starts at the floor.
-- ?1 tenant, ?2 scope
SELECT last_seq, cp_n, floor_seq, floor_mac, floor_key FROM racefree_audit_heads WHERE tenant = ?1 AND scope = ?2
