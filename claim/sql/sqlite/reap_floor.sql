-- reap_floor: raise the fence floor of the tenant's namespace (?1, ?2) to
-- the highest fence among the claims that reap (the next statement of the
-- same transaction, which holds SQLite's write lock) is about to delete:
-- the same selection, in the same deterministic order (the (tenant, ns,
-- expires_at) index, then rowid). The floor is what a key with no row
-- starts above, so a fence never goes backwards after a reap.
-- ?1 tenant, ?2 ns, ?3 cutoff ms, ?4 batch size
INSERT INTO racefree_claim_floors AS f (tenant, ns, floor)
SELECT ?1, ?2, m FROM (
  SELECT max(fence) AS m FROM (
    SELECT fence FROM racefree_claims
    WHERE tenant = ?1 AND ns = ?2 AND expires_at <= ?3
    ORDER BY expires_at, rowid
    LIMIT ?4))
WHERE m IS NOT NULL
ON CONFLICT (tenant, ns) DO UPDATE SET floor = MAX(f.floor, excluded.floor)
