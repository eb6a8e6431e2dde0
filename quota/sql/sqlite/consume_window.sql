-- consume_window: charge ?4 units to the fixed-window counter of
-- (?1 tenant, ?2 scope, ?3 key) and record the charge, in this one
-- statement, or change nothing. ?5 is the window length in ms, ?6 the
-- limit per window, ?7 the clock (NULL: the process clock).
--
-- Windows are aligned on the epoch: the current one starts at
-- now - now % ?5. tat holds the start of the window that used counts; a
-- row of an earlier window counts as 0 used. A key with no row inserts
-- used = n (n <= limit is checked before). The DO UPDATE's WHERE is the
-- decision: when it fails, SQLite writes nothing and returns no row, and
-- the caller reads the state to say how long to wait (SQLite has no
-- data-modifying CTE to read it in; in-process, the second read costs
-- little). Every SET reads the
-- old row, so used is computed against the old tat. expires_at is the end
-- of the window, after which the row means the same as no row. The
-- conflict target is the key that leads with the tenant.
INSERT INTO racefree_quotas AS q (tenant, scope, key, kind, tat, used, updated_at, expires_at)
SELECT ?1, ?2, ?3, 'window', now - now % ?5, ?4, now, now - now % ?5 + ?5
FROM (SELECT COALESCE(?7, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE true
ON CONFLICT (tenant, scope, key, kind) DO UPDATE SET
  used       = CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + ?4,
  tat        = excluded.tat,
  updated_at = excluded.updated_at,
  expires_at = excluded.expires_at
WHERE CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + ?4 <= ?6
RETURNING true AS allowed, tat, used, updated_at
