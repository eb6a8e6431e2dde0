-- reap_floor: raise namespace ?1's fence floor to the highest fence among
-- the claims that reap (the next statement of the same transaction, which
-- holds SQLite's write lock) is about to delete: the same selection, in the
-- same deterministic order (the (ns, expires_at) index, then rowid). The
-- floor is what a key with no row starts above, so a fence never goes
-- backwards after a reap.
-- ?1 ns, ?2 cutoff ms, ?3 batch size
INSERT INTO racefree_claim_floors AS f (ns, floor)
SELECT ?1, m FROM (
  SELECT max(fence) AS m FROM (
    SELECT fence FROM racefree_claims
    WHERE ns = ?1 AND expires_at <= ?2
    ORDER BY expires_at, rowid
    LIMIT ?3))
WHERE m IS NOT NULL
ON CONFLICT (ns) DO UPDATE SET floor = MAX(f.floor, excluded.floor)
