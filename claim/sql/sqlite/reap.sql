-- reap: delete up to ?4 claims of the tenant's namespace (?1, ?2) whose
-- expiry is at or before the cutoff ?3 (now - grace, computed once per
-- batch by the caller), in the order of the (tenant, ns, expires_at)
-- index, after reap_floor raised the floor over exactly these rows in the
-- same transaction. SQLite runs the transaction under its write lock, so
-- nothing changes between the two statements.
--
-- NULLs: a row with a NULL expiry (written before migration 002) never
-- matches expires_at <= ?3: it never lapsed, it is free to claim, and a
-- reap keeps it. It returns the deleted keys.
-- ?1 tenant, ?2 ns, ?3 cutoff ms, ?4 batch size
DELETE FROM racefree_claims WHERE rowid IN (
  SELECT rowid FROM racefree_claims
  WHERE tenant = ?1 AND ns = ?2 AND expires_at <= ?3
  ORDER BY expires_at, rowid
  LIMIT ?4
)
RETURNING key
