-- entries: a scope's entries after a number, in number order, for Verify
-- (which streams them without a limit) and List.
-- ?1 scope, ?2 after, ?3 limit (NULL: all)
SELECT seq, at, actor, action, subject, data, key_id, prev_mac, mac
FROM racefree_audit
WHERE scope = ?1 AND seq > ?2
ORDER BY seq
LIMIT COALESCE(?3, -1)
