-- refund_gcra: give ?4 units back to the GCRA counter of (?1 tenant, ?2
-- scope, ?3 key), ?5 the emission interval T in ms, ?6 the clock (NULL:
-- the process clock). Moving tat back by n*T refills n units; it never
-- goes below now, which is a full bucket, so a refund never raises the
-- counter above the burst. A key with no row is already full: nothing to
-- do, no row returned.
UPDATE racefree_quotas
SET tat        = MAX(tat - ?4 * ?5, COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER))),
    expires_at = MAX(tat - ?4 * ?5, COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)))
WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'gcra'
RETURNING tat, used, COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER))
