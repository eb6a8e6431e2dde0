-- next: hand out the scope's next number and return the chain head it
-- extends, in one statement. The upsert creates the head row idempotently
-- (the first entry is 1, under key epoch ?2) or increments last_seq; the
-- transaction holds SQLite's write lock from this statement on, so the
-- number and the prev_mac returned here cannot be handed to anyone else
-- before this entry commits or rolls back, and a rollback gives the number
-- back. last_mac and key_id are left alone: the insert's trigger sets them
-- once the caller has computed the entry's MAC.
-- ?1 scope, ?2 key id of a new scope, ?3 clock (NULL: the process clock)
INSERT INTO racefree_audit_heads AS h (scope, last_seq, last_mac, key_id, cp_n, cp_hash)
VALUES (?1, 1, X'', ?2, 0, X'')
ON CONFLICT (scope) DO UPDATE SET last_seq = h.last_seq + 1
RETURNING last_seq, last_mac, key_id, COALESCE(?3, CAST(unixepoch('subsec') * 1000 AS INTEGER))
