-- consume_sliding: charge ?4 units to the sliding-window counter of
-- (?1 tenant, ?2 scope, ?3 key) and record the charge, in this one
-- statement, or change nothing. ?5 is the window length W in ms, ?6 the
-- limit L, ?7 the clock (NULL: the process clock).
--
-- Windows are aligned on the epoch: the current one starts at
-- s = now - now % W. The row holds the start of the window that used
-- counts (tat) and the count of the window before it (prev). Seen from
-- now, a row of window s counts (used, prev), a row of window s - W counts
-- (0, used) (its used is now the previous window's), an older row (0, 0).
-- The charge is allowed when the previous window's count, weighted by the
-- part of it that the sliding window [now - W, now] still overlaps, plus
-- the current count and n, is at most L:
--   prev * (W - (now - s)) / W + used + n <= L,
-- compared exactly, multiplied out by W (Policy.Validate bounds L * W by
-- 2^61, so no product overflows). A key with no row inserts used = n,
-- prev = 0 (n <= L is checked before). The DO UPDATE's WHERE is the
-- decision: when it fails, SQLite writes nothing and returns no row, and
-- the caller reads the state to say how long to wait. Every SET and the
-- WHERE read the old row, so the shift of used into prev is computed
-- against the old tat. excluded carries now (updated_at) and s (tat).
-- expires_at is s + 2W: from then on the row counts (0, 0), the same as no
-- row.
INSERT INTO racefree_quotas AS q (tenant, scope, key, kind, tat, used, prev, updated_at, expires_at)
SELECT ?1, ?2, ?3, 'sliding_window', now - now % ?5, ?4, 0, now, now - now % ?5 + 2 * ?5
FROM (SELECT COALESCE(?7, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE true
ON CONFLICT (tenant, scope, key, kind) DO UPDATE SET
  used       = CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + ?4,
  prev       = CASE WHEN q.tat = excluded.tat THEN q.prev WHEN q.tat = excluded.tat - ?5 THEN q.used ELSE 0 END,
  tat        = excluded.tat,
  updated_at = excluded.updated_at,
  expires_at = excluded.expires_at
WHERE CASE WHEN q.tat = excluded.tat THEN q.prev WHEN q.tat = excluded.tat - ?5 THEN q.used ELSE 0 END * (?5 - (excluded.updated_at - excluded.tat))
    + (CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + ?4) * ?5
    <= ?6 * ?5
RETURNING true AS allowed, tat, used, prev, updated_at
