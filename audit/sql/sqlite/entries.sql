-- entries: a tenant's scope's entries after a number, in number order, for
-- Verify (which streams them without a limit) and List.
-- ?1 tenant, ?2 scope, ?3 after, ?4 limit (NULL: all)
SELECT seq, at, actor, action, subject, data, key_id, prev_mac, mac
FROM racefree_audit
WHERE tenant = ?1 AND scope = ?2 AND seq > ?3
ORDER BY seq
LIMIT COALESCE(?4, -1)
