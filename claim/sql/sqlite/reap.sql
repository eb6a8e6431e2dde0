-- reap: delete up to ?3 claims of namespace ?1 that lapsed at least ?2 ms
-- ago. Deleting a claim restarts its fence at 1, so the grace period must
-- outlast any holder that could still come back with an old fence.
-- ?1 ns, ?2 grace ms, ?3 batch size, ?4 clock
DELETE FROM racefree_claims WHERE (ns, key) IN (
  SELECT ns, key FROM racefree_claims
  WHERE ns = ?1 AND expires_at <= COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) - ?2
  LIMIT ?3
)
