-- get_legacy: get for a schema before migration 002.
-- ?1 ns, ?2 key
SELECT holder, count, first_seen, last_seen FROM racefree_claims WHERE ns = ?1 AND key = ?2
