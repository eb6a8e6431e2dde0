-- refund_sliding: give ?4 units back to the sliding-window counter of
-- (?1 tenant, ?2 scope, ?3 key), ?5 the window length in ms, ?6 the clock
-- (NULL: the process clock). Only a charge of the current window can be
-- refunded (tat is its start): a row of an earlier window has moved its
-- count into the previous window's, which is history. used never goes
-- below 0, so a refund never raises the remainder above the limit. No row
-- returned when there is nothing to refund.
UPDATE racefree_quotas
SET used = MAX(used - ?4, 0)
WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND kind = 'sliding_window'
  AND tat = COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)) - COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)) % ?5
RETURNING tat, used, prev, COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER))
