-- head: a scope's committed chain head. Verify reads it before the entries,
-- so that entries committed in between can only make the rows longer than
-- the head, never shorter.
-- $1 scope
SELECT last_seq, last_mac, key_id FROM racefree_audit_heads WHERE scope = $1
