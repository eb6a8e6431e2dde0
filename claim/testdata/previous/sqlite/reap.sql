-- reap: delete up to ?3 claims of namespace ?1 whose expiry is at or before
-- the cutoff ?2 (now - grace, computed once per batch by the caller), in
-- the order of the (ns, expires_at) index, after reap_floor raised the
-- floor over exactly these rows in the same transaction. Rows with a NULL
-- expiry (compatible mode) never match. SQLite runs the transaction under
-- its write lock, so nothing changes between the two statements. It
-- returns the deleted keys.
-- ?1 ns, ?2 cutoff ms, ?3 batch size
DELETE FROM racefree_claims WHERE rowid IN (
  SELECT rowid FROM racefree_claims
  WHERE ns = ?1 AND expires_at <= ?2
  ORDER BY expires_at, rowid
  LIMIT ?3
)
RETURNING key
