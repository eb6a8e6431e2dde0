-- checkpoint_head: take the scope's next checkpoint number and read the
-- head it signs, in one statement under the transaction's write lock, so
-- two checkpoints of one scope are numbered and chained one after the
-- other. No row: the scope has no entry yet.
-- ?1 scope, ?2 clock (NULL: the process clock)
UPDATE racefree_audit_heads SET cp_n = cp_n + 1
WHERE scope = ?1
RETURNING last_seq, last_mac, cp_n, cp_hash, COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER))
