-- refund_window: give ?3 units back to the fixed-window counter of
-- (?1 scope, ?2 key), ?4 the window length in ms, ?5 the clock (NULL: the
-- process clock). Only a charge of the current window can be refunded
-- (tat is its start): a row of an earlier window already counts as 0 used.
-- used never goes below 0, so a refund never raises the remainder above
-- the limit. No row returned when there is nothing to refund.
UPDATE racefree_quotas
SET used = MAX(used - ?3, 0)
WHERE scope = ?1 AND key = ?2 AND kind = 'window'
  AND tat = COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) - COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) % ?4
RETURNING tat, used, COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER))
