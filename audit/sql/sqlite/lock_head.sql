-- lock_head: read the scope's chain head that the next entry extends, and
-- the clock. The transaction holds SQLite's write lock (IMMEDIATE), so
-- nothing else appends before it ends: the number after last_seq and the
-- prev_mac returned here are this entry's alone, and inserting the entry
-- moves the head (the racefree_audit_chain trigger), so a rollback gives
-- the number back. No row: the tenant's scope has no entry yet (new_head).
-- ?1 tenant, ?2 scope, ?3 clock (NULL: the process clock)
SELECT last_seq, last_mac, key_id, COALESCE(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER))
FROM racefree_audit_heads WHERE tenant = ?1 AND scope = ?2
