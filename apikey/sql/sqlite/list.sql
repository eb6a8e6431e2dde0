-- list: the keys of tenant ?1, oldest first, without their hashes.
SELECT id, scopes, name, created_at, revoked_at
  FROM racefree_keys
 WHERE tenant = ?1
 ORDER BY created_at, id
