-- audit: one row per audit scope of the tenant, for /metrics: its last
-- entry, its retention floor (the last entry pruned, 0 when none), the
-- position up to which a checkpoint or the retention floor
-- covers it (the latest checkpoint's entry, or the floor when pruning
-- passed it), and the time of the first entry past that position (NULL
-- when there is none: every entry is covered). Each scope costs three
-- primary-key lookups.
-- ?1 tenant
SELECT scope, last_seq, floor_seq, covered,
  (SELECT at FROM racefree_audit e WHERE e.tenant = ?1 AND e.scope = h.scope AND e.seq = h.covered + 1)
FROM (
  SELECT scope, last_seq, floor_seq, MAX(floor_seq, COALESCE((
    SELECT seq FROM racefree_audit_checkpoints c
    WHERE c.tenant = ?1 AND c.scope = racefree_audit_heads.scope ORDER BY n DESC LIMIT 1), 0)) AS covered
  FROM racefree_audit_heads WHERE tenant = ?1
) h
