-- refund_gcra: give ?3 units back to the GCRA counter of (?1 scope, ?2 key),
-- ?4 the emission interval T in ms, ?5 the clock (NULL: the process clock).
-- Moving tat back by n*T refills n units; it never goes below now, which
-- is a full bucket, so a refund never raises the counter above the burst.
-- A key with no row is already full: nothing to do, no row returned.
UPDATE racefree_quotas
SET tat        = MAX(tat - ?3 * ?4, COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER))),
    expires_at = MAX(tat - ?3 * ?4, COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)))
WHERE scope = ?1 AND key = ?2 AND kind = 'gcra'
RETURNING tat, used, COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER))
