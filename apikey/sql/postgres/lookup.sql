-- lookup: one key of tenant $1 by its id, by primary key. The caller
-- compares the hash in constant time and refuses a revoked key.
-- $1 tenant, $2 id
SELECT hash, scopes, name, created_at, revoked_at
  FROM racefree_keys
 WHERE tenant = $1 AND id = $2
