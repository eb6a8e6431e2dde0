-- audit: one row per audit scope of the tenant, for /metrics: its last
-- entry, its retention floor (the last entry pruned, 0 when none), the
-- position up to which a checkpoint or the retention floor
-- covers it (the latest checkpoint's entry, or the floor when pruning
-- passed it), and the time of the first entry past that position (NULL
-- when there is none: every entry is covered). Read at scrape time in a
-- read-only transaction; each scope costs three primary-key lookups.
-- $1 tenant
SELECT h.scope, h.last_seq, h.floor_seq, GREATEST(h.floor_seq, COALESCE(c.seq, 0)), e.at
FROM racefree_audit_heads h
LEFT JOIN LATERAL (
  SELECT seq FROM racefree_audit_checkpoints
  WHERE tenant = h.tenant AND scope = h.scope ORDER BY n DESC LIMIT 1
) c ON true
LEFT JOIN racefree_audit e
  ON e.tenant = h.tenant AND e.scope = h.scope AND e.seq = GREATEST(h.floor_seq, COALESCE(c.seq, 0)) + 1
WHERE h.tenant = $1
