-- checkpoints: a tenant's scope's checkpoints after number $3, oldest
-- first; with $4 = 1 only the latest.
-- $1 tenant, $2 scope, $3 after, $4 latest only
SELECT n, seq, mac, at, prev, key_id, sig FROM racefree_audit_checkpoints
WHERE tenant = $1 AND scope = $2 AND n > $3
  AND ($4 = 0 OR n = (SELECT MAX(n) FROM racefree_audit_checkpoints WHERE tenant = $1 AND scope = $2))
ORDER BY n
