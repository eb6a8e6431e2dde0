-- checkpoints: a scope's checkpoints after number ?2, oldest first; with
-- ?3 = 1 only the latest.
-- ?1 scope, ?2 after, ?3 latest only
SELECT n, seq, mac, at, prev, key_id, sig FROM racefree_audit_checkpoints
WHERE scope = ?1 AND n > ?2
  AND (?3 = 0 OR n = (SELECT MAX(n) FROM racefree_audit_checkpoints WHERE scope = ?1))
ORDER BY n
